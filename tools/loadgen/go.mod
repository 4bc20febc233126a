module github.com/configsync/configsync/tools/loadgen

go 1.26

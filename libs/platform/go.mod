module github.com/configsync/configsync/libs/platform

go 1.26

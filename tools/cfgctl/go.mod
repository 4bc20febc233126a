module github.com/configsync/configsync/tools/cfgctl

go 1.26

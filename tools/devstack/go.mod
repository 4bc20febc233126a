module github.com/configsync/configsync/tools/devstack

go 1.26

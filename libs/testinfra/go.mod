module github.com/configsync/configsync/libs/testinfra

go 1.26

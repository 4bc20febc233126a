module github.com/configsync/configsync/libs/protocol

go 1.26

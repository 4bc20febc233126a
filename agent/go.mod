module github.com/configsync/configsync/agent

go 1.26

module github.com/configsync/configsync/libs/agentconfig

go 1.26

module github.com/configsync/configsync/services/config-api

go 1.26

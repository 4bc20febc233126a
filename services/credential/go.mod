module github.com/configsync/configsync/services/credential

go 1.26

module github.com/configsync/configsync/services/resolver

go 1.26

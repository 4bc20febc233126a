module github.com/configsync/configsync/e2e

go 1.26

module github.com/configsync/configsync/services/delivery

go 1.26

module github.com/configsync/configsync/services/ack-ingest

go 1.26

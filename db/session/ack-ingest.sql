-- Session-scoped tables of ack-ingest. They are not part of the migrated schema: each connection
-- creates them on first use (CreateHeartbeatBatch), and sqlc reads this file only to type the
-- queries over them.

-- heartbeat_batch holds one batch of heartbeats between its COPY and the UPDATE ... FROM that writes
-- it into hosts. It is temporary (private to the connection, never WAL-logged) and emptied at every
-- commit, so a connection reused by another batch starts empty.
CREATE TEMPORARY TABLE heartbeat_batch (
    host_id               uuid        NOT NULL,
    agent_version         text        NOT NULL,
    config_hash           text        NOT NULL,
    config_version        bigint      NOT NULL,
    config_versions       jsonb       NOT NULL,
    received_at           timestamptz NOT NULL,
    heartbeat_interval_ms bigint      NOT NULL
) ON COMMIT DELETE ROWS;

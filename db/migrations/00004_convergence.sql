-- +goose Up
-- Liveness follows each host's own heartbeat period (protocol.Online): the agent reports it in every
-- heartbeat (NULL: an agent that does not report one, judged by the deployment's window alone).
ALTER TABLE hosts ADD COLUMN heartbeat_interval_ms bigint;

-- Acks of the same (host, type, version) are ordered by their stream sequence in CONFIGSYNC_ACKS, so
-- the one the agent sent last is kept whichever ack-ingest writer commits first (0: written before).
ALTER TABLE host_config_apply_status ADD COLUMN ack_seq bigint NOT NULL DEFAULT 0;

-- Anti-entropy repairs asked of delivery per (host, type): the version the host should hold, how many
-- repairs were asked for it, and when the next one may be. A repair of the same version backs off, so
-- a version the agent refuses (acked failed) or that cannot be delivered (a credential that fails) is
-- not re-sent at every heartbeat; drift shows the attempts. The row goes once the host reports the
-- version.
CREATE TABLE config_repairs (
    host_id         uuid NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    config_type     text NOT NULL,
    version         bigint NOT NULL,
    attempts        integer NOT NULL,
    first_at        timestamptz NOT NULL,
    last_at         timestamptz NOT NULL,
    next_at         timestamptz NOT NULL,
    PRIMARY KEY (host_id, config_type)
);

-- +goose Down
DROP TABLE IF EXISTS config_repairs;
ALTER TABLE host_config_apply_status DROP COLUMN IF EXISTS ack_seq;
ALTER TABLE hosts DROP COLUMN IF EXISTS heartbeat_interval_ms;

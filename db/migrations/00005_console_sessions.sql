-- +goose Up
-- Web console sessions. The browser holds a random session id in an HttpOnly cookie; only its SHA-256 is
-- stored, so a database dump opens no session. A session acts as the API token it was opened with and
-- ends when that token is revoked (the lookup joins api_tokens) or deleted (cascade), at expires_at, or
-- at sign-out. Any config-api replica serves any session.
CREATE TABLE console_sessions (
    id_hash    bytea PRIMARY KEY,
    token_id   uuid NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);
CREATE INDEX console_sessions_token_idx ON console_sessions (token_id);

-- The audit log is read by client, newest first.
CREATE INDEX audit_events_client_idx ON audit_events (client_id, id);

-- The fleet overview counts hosts with a failed apply; failed rows are few, so a partial index finds them
-- without reading every host's status.
CREATE INDEX host_config_apply_status_failed_idx ON host_config_apply_status (host_id) WHERE status = 'failed';

-- +goose Down
DROP INDEX IF EXISTS host_config_apply_status_failed_idx;
DROP INDEX IF EXISTS audit_events_client_idx;
DROP TABLE IF EXISTS console_sessions;

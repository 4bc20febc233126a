-- +goose Up
-- Signed statements (issue: signed configs). The resolver signs one statement per effective config it
-- computes, keyed by (scope, config_type, version): scope is 'agent:<agent_id>' for a host-specific
-- config or 'environment:<environment_id>' for one that every host of the environment without a row of
-- its own runs. Versions come from one sequence, so a key names one content for good; the statement is
-- signed once and read back on every later fetch and push. statement holds the exact canonical JSON
-- bytes that were signed. Rows of superseded versions are harmless; the resolver prunes nothing.
CREATE TABLE config_statements (
    scope       text NOT NULL,
    config_type text NOT NULL,
    version     bigint NOT NULL,
    statement   bytea NOT NULL,
    key_id      text NOT NULL,
    signature   bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, config_type, version)
);
-- Compromise recovery deletes what a key signed: DELETE FROM config_statements WHERE key_id = '...'.
CREATE INDEX config_statements_key_idx ON config_statements (key_id);

-- One signed identity statement per host: its agent id belongs to its environment.
CREATE TABLE host_identity_statements (
    host_id    uuid PRIMARY KEY REFERENCES hosts (id) ON DELETE CASCADE,
    statement  bytea NOT NULL,
    key_id     text NOT NULL,
    signature  bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX host_identity_statements_key_idx ON host_identity_statements (key_id);

-- +goose Down
DROP TABLE host_identity_statements;
DROP TABLE config_statements;

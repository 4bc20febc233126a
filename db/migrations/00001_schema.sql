-- +goose Up
-- One sequence versions every config write and every tombstone, so the effective version of a
-- (host, type) pair (max of environment and host) only ever grows.
CREATE SEQUENCE config_version_seq AS bigint START 1;

CREATE TABLE clients (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name       text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE environments (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    client_id  uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (client_id, name)
);

CREATE TABLE hosts (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    client_id            uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    environment_id       uuid NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    hostname             text NOT NULL CHECK (length(hostname) BETWEEN 1 AND 255),
    agent_id             text NOT NULL UNIQUE CHECK (agent_id ~ '^[A-Za-z0-9_-]{1,128}$'),
    -- The agent's NATS user public key (per-agent identity); null when none was issued.
    nats_public_key      text,
    revoked_at           timestamptz,
    -- Reported by the agent's heartbeats (written by ack-ingest).
    agent_version        text,
    config_hash          text,
    config_version       bigint,
    config_versions      jsonb,
    last_heartbeat_at    timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (environment_id, hostname)
);
CREATE INDEX hosts_environment_idx ON hosts (environment_id, id);
CREATE INDEX hosts_client_idx ON hosts (client_id);

-- Environment defaults. A delete keeps the row as a tombstone (config_data NULL, deleted_at set) with a
-- new version, so deletions are pushed and versions never move backwards.
CREATE TABLE environment_configs (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    environment_id uuid NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    config_type    text NOT NULL,
    config_data    jsonb,
    version        bigint NOT NULL,
    deleted_at     timestamptz,
    updated_by     text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (environment_id, config_type),
    CHECK ((config_data IS NULL) = (deleted_at IS NOT NULL))
);

-- Host overrides, same shape and the same tombstone rule.
CREATE TABLE host_configs (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    host_id     uuid NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    config_type text NOT NULL,
    config_data jsonb,
    version     bigint NOT NULL,
    deleted_at  timestamptz,
    updated_by  text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (host_id, config_type),
    CHECK ((config_data IS NULL) = (deleted_at IS NOT NULL))
);
CREATE INDEX host_configs_type_idx ON host_configs (config_type, host_id);

-- Every write, delete and rollback of either level, for history and rollback.
CREATE TABLE config_revisions (
    id             bigserial PRIMARY KEY,
    scope          text NOT NULL CHECK (scope IN ('environment', 'host')),
    client_id      uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    environment_id uuid NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    host_id        uuid REFERENCES hosts (id) ON DELETE CASCADE,
    config_type    text NOT NULL,
    version        bigint NOT NULL,
    action         text NOT NULL CHECK (action IN ('put', 'delete', 'rollback')),
    old_data       jsonb,
    new_data       jsonb,
    actor          text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((scope = 'host') = (host_id IS NOT NULL))
);
CREATE INDEX config_revisions_env_idx ON config_revisions (environment_id, config_type, version) WHERE scope = 'environment';
CREATE INDEX config_revisions_host_idx ON config_revisions (host_id, config_type, version) WHERE scope = 'host';

-- Secret material is only ever stored encrypted; ciphertext carries its scheme and key version
-- ("local:v1:..." or "vault:v1:..."). fields lists the secret's field names (metadata, not values).
CREATE TABLE credentials (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    client_id      uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    environment_id uuid REFERENCES environments (id) ON DELETE CASCADE,
    name           text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    fields         text[] NOT NULL,
    ciphertext     text NOT NULL,
    key_version    text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (client_id, name)
);

-- The last apply result per host and config type (spec: UNIQUE(host_id, config_type)).
CREATE TABLE host_config_apply_status (
    id          bigserial PRIMARY KEY,
    host_id     uuid NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    config_type text NOT NULL,
    version     bigint NOT NULL,
    status      text NOT NULL CHECK (status IN ('applied', 'failed')),
    error       text,
    applied_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (host_id, config_type)
);

-- Bearer tokens, stored as SHA-256 of the token. client_id NULL means an admin token.
CREATE TABLE api_tokens (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    token_hash   bytea NOT NULL UNIQUE,
    client_id    uuid REFERENCES clients (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- Security-relevant events (cross-tenant attempts, token use failures, credential changes).
CREATE TABLE audit_events (
    id         bigserial PRIMARY KEY,
    actor      text NOT NULL,
    client_id  uuid,
    action     text NOT NULL,
    object     text NOT NULL DEFAULT '',
    detail     jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_events_created_idx ON audit_events (created_at);

-- Transactional outbox: written in the same transaction as the change it announces, published to
-- JetStream by the relay with Nats-Msg-Id = 'outbox-' || id.
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    subject      text NOT NULL,
    payload      jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    attempts     integer NOT NULL DEFAULT 0,
    last_error   text
);
CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;

-- Wake the relay as soon as an outbox row commits (NOTIFY is delivered at commit, never on rollback).
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('configsync_outbox', NEW.id::text);
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_notify();

-- +goose Down
DROP TRIGGER IF EXISTS outbox_notify ON outbox;
DROP FUNCTION IF EXISTS outbox_notify();
DROP TABLE IF EXISTS outbox, audit_events, api_tokens, host_config_apply_status, credentials,
    config_revisions, host_configs, environment_configs, hosts, environments, clients;
DROP SEQUENCE IF EXISTS config_version_seq;

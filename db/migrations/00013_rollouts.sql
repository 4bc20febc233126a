-- +goose Up
-- Staged rollouts (issue 18): an environment-level change of one config type that reaches the
-- environment's hosts stage by stage, gated on their apply acks and heartbeats.
--
-- The environment row (environment_configs) keeps the previous revision while a rollout runs; the
-- rollout row holds the new data. A host joins the rollout when a stage that holds it starts: it gets a
-- rollout_hosts row with a version of its own taken from config_version_seq at that moment (the
-- stage's version; a host placed later, say registered mid-rollout, gets the version of the tick that
-- placed it). rollout_layers (00014) turns these rows into each host's environment layer. On completion
-- the environment row takes the new data at the last stage's version (final_version); a revert (abort or
-- auto-revert) writes the previous data at a new version instead. See the README, "Staged rollouts".
CREATE TABLE rollouts (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    client_id        uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    environment_id   uuid NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    config_type      text NOT NULL,
    state            text NOT NULL CHECK (state IN ('running', 'paused', 'completed', 'aborted', 'reverted')),
    reason           text NOT NULL DEFAULT '',
    -- The plan as given, defaults filled in; stages holds each stage's state, start and pass times,
    -- version and (count stages) materialized members.
    plan             jsonb NOT NULL,
    stages           jsonb NOT NULL,
    current_stage    integer NOT NULL DEFAULT 0,
    -- An operator asked to skip the current stage's remaining bake.
    promoted         boolean NOT NULL DEFAULT false,
    config_data      jsonb NOT NULL,
    -- The environment row when the rollout started (0 / NULL: none or a tombstone).
    previous_version bigint NOT NULL,
    previous_data    jsonb,
    -- The first stage's version: the rollout's revision in config_revisions.
    version          bigint NOT NULL,
    -- Completed: the environment row's version it wrote. Reverted: the version of the revert write.
    final_version    bigint,
    created_by       text NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
-- One active rollout per (environment, type), enforced here.
CREATE UNIQUE INDEX rollouts_active_idx ON rollouts (environment_id, config_type) WHERE state IN ('running', 'paused');
CREATE INDEX rollouts_env_type_idx ON rollouts (environment_id, config_type, created_at DESC);
-- A staged version's data: the rollout of (environment, type) with the newest version at or below it
-- (a rollout takes its stage versions only while active, and the next one starts after it ended).
CREATE INDEX rollouts_version_idx ON rollouts (environment_id, config_type, version);
-- The controller's scan of active rollouts.
CREATE INDEX rollouts_live_idx ON rollouts (id) WHERE state IN ('running', 'paused');

-- The hosts a rollout has reached: each with the stage that holds it and the version of its
-- environment layer from then on. Rows are only ever added while the rollout is active.
CREATE TABLE rollout_hosts (
    rollout_id uuid NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    host_id    uuid NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    stage      integer NOT NULL,
    version    bigint NOT NULL,
    joined_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rollout_id, host_id)
);
CREATE INDEX rollout_hosts_host_idx ON rollout_hosts (host_id);

-- +goose Down
DROP TABLE IF EXISTS rollout_hosts;
DROP TABLE IF EXISTS rollouts;

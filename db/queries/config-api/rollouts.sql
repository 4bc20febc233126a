-- Staged rollouts (issue 18): the rollout rows, the hosts they reached, and the environment writes
-- that end them. Every query of a rollout runs in the transaction that holds its row lock.

-- name: InsertRollout :one
INSERT INTO rollouts (client_id, environment_id, config_type, state, reason, plan, stages, current_stage,
                      config_data, previous_version, previous_data, version, created_by)
VALUES (@client_id, @environment_id, @config_type, @state, @reason, @plan, @stages, @current_stage,
        @config_data, @previous_version, sqlc.narg(previous_data), @version, @created_by)
RETURNING *;

-- name: UpdateRollout :exec
UPDATE rollouts
SET state = @state, reason = @reason, stages = @stages, current_stage = @current_stage, promoted = @promoted,
    final_version = sqlc.narg(final_version), updated_at = now()
WHERE id = @id;

-- name: GetRollout :one
SELECT r.* FROM rollouts r
WHERE r.id = @id AND r.environment_id = @environment_id AND r.config_type = @config_type
  AND (sqlc.narg(client_filter)::uuid IS NULL OR r.client_id = sqlc.narg(client_filter)::uuid);

-- name: LockRollout :one
-- The rollout's row, locked for an operator's action (waits for the controller's tick to end).
SELECT r.* FROM rollouts r
WHERE r.id = @id AND r.environment_id = @environment_id AND r.config_type = @config_type
  AND (sqlc.narg(client_filter)::uuid IS NULL OR r.client_id = sqlc.narg(client_filter)::uuid)
FOR UPDATE;

-- name: LeadRollout :one
-- The controller's lock on an active rollout: SKIP LOCKED, so a rollout another replica is ticking (or
-- an operator is acting on) is left to it, and exactly one replica leads each rollout at a time.
SELECT r.* FROM rollouts r
WHERE r.id = @id AND r.state IN ('running', 'paused')
FOR UPDATE SKIP LOCKED;

-- name: ListRollouts :many
SELECT r.* FROM rollouts r
WHERE r.environment_id = @environment_id AND r.config_type = @config_type
ORDER BY r.created_at DESC, r.id
LIMIT @max_rows;

-- name: ActiveRolloutIDs :many
SELECT id FROM rollouts WHERE state IN ('running', 'paused') ORDER BY id;

-- name: ActiveRolloutOf :one
-- The running or paused rollout of an environment's type, if any (writes of that type are refused).
SELECT id FROM rollouts
WHERE environment_id = @environment_id AND config_type = @config_type AND state IN ('running', 'paused');

-- name: NextConfigVersion :one
SELECT nextval('config_version_seq')::bigint AS version;

-- name: RolloutFleet :many
-- The active hosts of the rollout's environment with what stage placement needs (inventory labels,
-- liveness inputs) and the stage that already holds them (-1: not reached).
SELECT h.id, h.inventory_labels, h.last_heartbeat_at, COALESCE(h.heartbeat_interval_ms, 0)::bigint AS heartbeat_interval_ms,
       COALESCE(rh.stage, -1)::integer AS stage
FROM hosts h
LEFT JOIN rollout_hosts rh ON rh.rollout_id = @rollout_id AND rh.host_id = h.id
WHERE h.environment_id = @environment_id AND h.revoked_at IS NULL
ORDER BY h.id;

-- name: InsertRolloutHosts :exec
-- Hosts join the rollout at one version (a stage's start, or a later placement); a host already in it
-- keeps its row.
INSERT INTO rollout_hosts (rollout_id, host_id, stage, version)
SELECT @rollout_id, v.host_id, v.stage, @version
FROM (SELECT unnest(@host_ids::uuid[]) AS host_id, unnest(@stages::integer[]) AS stage) AS v
ORDER BY v.host_id
ON CONFLICT (rollout_id, host_id) DO NOTHING;

-- name: RolloutMembers :many
-- The active hosts the rollout reached, with what a tally needs: liveness inputs, their environment
-- layer (the version they joined at), their override of the type and their last ack.
SELECT rh.host_id, rh.stage, rh.version, rh.joined_at, h.last_heartbeat_at,
       COALESCE(h.heartbeat_interval_ms, 0)::bigint AS heartbeat_interval_ms,
       COALESCE(hc.version, 0)::bigint AS host_version, (hc.config_data IS NOT NULL)::boolean AS host_present,
       hc.updated_at AS host_written_at,
       COALESCE(s.version, 0)::bigint AS ack_version, COALESCE(s.status, '')::text AS ack_status,
       COALESCE(s.error, '')::text AS ack_error, s.applied_at AS ack_applied_at
FROM rollout_hosts rh
JOIN hosts h ON h.id = rh.host_id AND h.revoked_at IS NULL
LEFT JOIN host_configs hc ON hc.host_id = rh.host_id AND hc.config_type = @config_type
LEFT JOIN host_config_apply_status s ON s.host_id = rh.host_id AND s.config_type = @config_type
WHERE rh.rollout_id = @rollout_id
ORDER BY rh.host_id;

-- name: CompleteEnvironmentConfig :one
-- A completed rollout's data becomes the environment row at a new version (hosts it reached keep the
-- versions they joined at: rollout_layers).
INSERT INTO environment_configs (environment_id, config_type, config_data, version, deleted_at, updated_by)
VALUES (@environment_id, @config_type, @config_data, nextval('config_version_seq'), NULL, @updated_by)
ON CONFLICT (environment_id, config_type) DO UPDATE
SET config_data = EXCLUDED.config_data,
    version     = EXCLUDED.version,
    deleted_at  = NULL,
    updated_by  = EXCLUDED.updated_by,
    updated_at  = now()
RETURNING id, environment_id, config_type, config_data, version, deleted_at, updated_by, created_at, updated_at;

-- name: ActiveRolloutsIn :many
-- The running and paused rollouts of some environments (the console's links to them), restricted to a
-- client when filtered.
SELECT r.* FROM rollouts r
WHERE r.environment_id = ANY(@environment_ids::uuid[]) AND r.state IN ('running', 'paused')
  AND (sqlc.narg(client_filter)::uuid IS NULL OR r.client_id = sqlc.narg(client_filter)::uuid)
ORDER BY r.environment_id, r.config_type;

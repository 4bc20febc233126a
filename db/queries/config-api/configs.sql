-- Environment configs, host overrides (both kept as tombstones on delete) and their revisions.

-- name: LockEnvironment :one
-- Serialises config writes of one environment (FOR NO KEY UPDATE does not block foreign-key checks).
SELECT id, client_id
FROM environments
WHERE id = @id
  AND (sqlc.narg(client_filter)::uuid IS NULL OR client_id = sqlc.narg(client_filter)::uuid)
FOR NO KEY UPDATE;

-- name: LockEnvironmentShared :exec
-- Host override writes hold this so they serialise against environment writes of the same environment.
SELECT id FROM environments WHERE id = @id FOR SHARE;

-- name: LockHost :one
SELECT id, client_id, environment_id, agent_id, revoked_at
FROM hosts
WHERE id = @id
  AND (sqlc.narg(client_filter)::uuid IS NULL OR client_id = sqlc.narg(client_filter)::uuid)
FOR NO KEY UPDATE;

-- name: GetEnvironmentConfig :one
SELECT id, environment_id, config_type, config_data, version, deleted_at, updated_by, created_at, updated_at
FROM environment_configs
WHERE environment_id = @environment_id AND config_type = @config_type;

-- name: ListEnvironmentConfigs :many
SELECT id, environment_id, config_type, config_data, version, deleted_at, updated_by, created_at, updated_at
FROM environment_configs
WHERE environment_id = @environment_id AND deleted_at IS NULL
ORDER BY config_type;

-- name: UpsertEnvironmentConfig :one
INSERT INTO environment_configs (environment_id, config_type, config_data, version, deleted_at, updated_by)
VALUES (@environment_id, @config_type, sqlc.narg(config_data), nextval('config_version_seq'),
        CASE WHEN sqlc.narg(config_data)::jsonb IS NULL THEN now() END, @updated_by)
ON CONFLICT (environment_id, config_type) DO UPDATE
SET config_data = EXCLUDED.config_data,
    version     = EXCLUDED.version,
    deleted_at  = EXCLUDED.deleted_at,
    updated_by  = EXCLUDED.updated_by,
    updated_at  = now()
RETURNING id, environment_id, config_type, config_data, version, deleted_at, updated_by, created_at, updated_at;

-- name: GetHostConfig :one
SELECT id, host_id, config_type, config_data, version, deleted_at, updated_by, created_at, updated_at
FROM host_configs
WHERE host_id = @host_id AND config_type = @config_type;

-- name: UpsertHostConfig :one
INSERT INTO host_configs (host_id, config_type, config_data, version, deleted_at, updated_by)
VALUES (@host_id, @config_type, sqlc.narg(config_data), nextval('config_version_seq'),
        CASE WHEN sqlc.narg(config_data)::jsonb IS NULL THEN now() END, @updated_by)
ON CONFLICT (host_id, config_type) DO UPDATE
SET config_data = EXCLUDED.config_data,
    version     = EXCLUDED.version,
    deleted_at  = EXCLUDED.deleted_at,
    updated_by  = EXCLUDED.updated_by,
    updated_at  = now()
RETURNING id, host_id, config_type, config_data, version, deleted_at, updated_by, created_at, updated_at;

-- name: InsertRevision :exec
INSERT INTO config_revisions (scope, client_id, environment_id, host_id, config_type, version, action,
                              old_data, new_data, actor)
VALUES (@scope, @client_id, @environment_id, sqlc.narg(host_id), @config_type, @version, @action,
        sqlc.narg(old_data), sqlc.narg(new_data), @actor);

-- name: ListEnvironmentRevisions :many
SELECT id, version, action, old_data, new_data, actor, created_at
FROM config_revisions
WHERE scope = 'environment' AND environment_id = @environment_id AND config_type = @config_type
ORDER BY version DESC
LIMIT @max_rows;

-- name: ListHostRevisions :many
SELECT id, version, action, old_data, new_data, actor, created_at
FROM config_revisions
WHERE scope = 'host' AND host_id = @host_id AND config_type = @config_type
ORDER BY version DESC
LIMIT @max_rows;

-- name: GetEnvironmentRevision :one
SELECT id, version, action, old_data, new_data, actor, created_at
FROM config_revisions
WHERE scope = 'environment' AND environment_id = @environment_id AND config_type = @config_type
  AND version = @version;

-- name: GetHostRevision :one
SELECT id, version, action, old_data, new_data, actor, created_at
FROM config_revisions
WHERE scope = 'host' AND host_id = @host_id AND config_type = @config_type AND version = @version;

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

-- name: ListCredentialEnvironmentConfigs :many
-- The environments of a client whose live config of config_type references a credential (a collector
-- with "credential_id": credential_id). A re-announce reads it before locking and re-reads each row under
-- lock; a credential deletion reads it alone to refuse deleting a credential in use.
SELECT ec.environment_id
FROM environment_configs ec
JOIN environments e ON e.id = ec.environment_id
WHERE e.client_id = @client_id
  AND ec.config_type = @config_type
  AND ec.deleted_at IS NULL
  AND ec.config_data @> jsonb_build_array(jsonb_build_object('credential_id', @credential_id::text))
ORDER BY ec.environment_id;

-- name: ListCredentialHostConfigs :many
-- The active hosts of a client whose live override of config_type references a credential.
SELECT hc.host_id
FROM host_configs hc
JOIN hosts h ON h.id = hc.host_id
WHERE h.client_id = @client_id
  AND h.revoked_at IS NULL
  AND hc.config_type = @config_type
  AND hc.deleted_at IS NULL
  AND hc.config_data @> jsonb_build_array(jsonb_build_object('credential_id', @credential_id::text))
ORDER BY hc.host_id;

-- name: LockHosts :many
-- Locks several hosts of one client, in id order (the order every multi-row lock takes).
SELECT id, client_id, environment_id, agent_id, revoked_at
FROM hosts
WHERE id = ANY(@ids::uuid[]) AND client_id = @client_id
ORDER BY id
FOR NO KEY UPDATE;

-- name: LockEnvironments :many
-- Locks several environments of one client, in id order.
SELECT id, client_id
FROM environments
WHERE id = ANY(@ids::uuid[]) AND client_id = @client_id
ORDER BY id
FOR NO KEY UPDATE;

-- name: ListEnvironmentConfigsOfType :many
-- The rows (tombstones included) of one type of several environments.
SELECT id, environment_id, config_type, config_data, version, deleted_at, updated_by, created_at, updated_at
FROM environment_configs
WHERE environment_id = ANY(@environment_ids::uuid[]) AND config_type = @config_type;

-- name: ListHostConfigsOfType :many
-- The rows (tombstones included) of one type of several hosts.
SELECT id, host_id, config_type, config_data, version, deleted_at, updated_by, created_at, updated_at
FROM host_configs
WHERE host_id = ANY(@host_ids::uuid[]) AND config_type = @config_type;

-- name: ListEnvironmentsWithInlineSecrets :many
-- Environments whose live collectors config holds a secret inline (a collector with a username or a
-- password member), stored before the API refused them; config-api migrate-inline-secrets moves them
-- into credentials. A sequential scan of one type's rows: an operator command, run once.
SELECT ec.environment_id
FROM environment_configs ec
WHERE ec.config_type = 'collectors'
  AND ec.deleted_at IS NULL
  AND jsonb_path_exists(ec.config_data, '$[*] ? (exists(@.password) || exists(@.username))')
ORDER BY ec.environment_id;

-- name: ListHostsWithInlineSecrets :many
-- Hosts (revoked ones too: the secret is at rest all the same) whose live collectors override holds a
-- secret inline.
SELECT hc.host_id
FROM host_configs hc
WHERE hc.config_type = 'collectors'
  AND hc.deleted_at IS NULL
  AND jsonb_path_exists(hc.config_data, '$[*] ? (exists(@.password) || exists(@.username))')
ORDER BY hc.host_id;

-- name: ListRevisionsWithInlineSecrets :many
-- Collectors revisions after id whose old or new data holds an inline secret value not yet replaced by
-- "[REDACTED]", in id order.
SELECT id, old_data, new_data
FROM config_revisions
WHERE config_type = 'collectors'
  AND id > @after_id
  AND (jsonb_path_exists(old_data, '$[*] ? ((exists(@.password) && @.password != "[REDACTED]") || (exists(@.username) && @.username != "[REDACTED]"))')
    OR jsonb_path_exists(new_data, '$[*] ? ((exists(@.password) && @.password != "[REDACTED]") || (exists(@.username) && @.username != "[REDACTED]"))'))
ORDER BY id
LIMIT @max_rows;

-- name: ScrubRevision :exec
UPDATE config_revisions
SET old_data = @old_data, new_data = @new_data
WHERE id = @id;

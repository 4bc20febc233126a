-- Host registration and the host views operators read (heartbeat state and apply status).

-- name: CreateHost :one
INSERT INTO hosts (client_id, environment_id, hostname, agent_id, nats_public_key)
VALUES (@client_id, @environment_id, @hostname, @agent_id, sqlc.narg(nats_public_key))
RETURNING id, client_id, environment_id, hostname, agent_id, created_at;

-- name: CreateHosts :many
-- Registers a batch of hosts of one environment in one statement (so all or none): the arrays hold one
-- element per host (unnested side by side), an empty nats_public_keys element meaning none was issued.
-- Rows come back in no promised order; agent_id (unique) matches them to the batch.
INSERT INTO hosts (client_id, environment_id, hostname, agent_id, nats_public_key)
SELECT @client_id::uuid, @environment_id::uuid, b.hostname, b.agent_id, NULLIF(b.nats_public_key, '')
FROM (SELECT unnest(@hostnames::text[]) AS hostname, unnest(@agent_ids::text[]) AS agent_id,
             unnest(@nats_public_keys::text[]) AS nats_public_key) AS b
RETURNING id, client_id, environment_id, hostname, agent_id, created_at;

-- name: FindHostConflicts :many
-- The existing hosts a batch collides with: any host with one of its agent ids (unique across all
-- environments), or a host of the environment with one of its hostnames.
SELECT agent_id, hostname, environment_id
FROM hosts
WHERE agent_id = ANY(@agent_ids::text[])
   OR (environment_id = @environment_id AND hostname = ANY(@hostnames::text[]));

-- name: GetHost :one
SELECT h.id, h.client_id, h.environment_id, h.hostname, h.agent_id, h.revoked_at, h.agent_version,
       h.config_hash, h.config_version, h.config_versions, h.last_heartbeat_at, h.created_at,
       COALESCE((SELECT jsonb_object_agg(s.config_type, jsonb_build_object(
                   'version', s.version, 'status', s.status, 'error', s.error, 'applied_at', s.applied_at))
                 FROM host_config_apply_status s WHERE s.host_id = h.id), '{}'::jsonb)::jsonb AS apply_status,
       h.heartbeat_interval_ms,
       COALESCE((SELECT jsonb_object_agg(r.config_type, jsonb_build_object(
                   'version', r.version, 'attempts', r.attempts, 'first_at', r.first_at, 'last_at', r.last_at))
                 FROM config_repairs r WHERE r.host_id = h.id), '{}'::jsonb)::jsonb AS repairs
FROM hosts h
WHERE h.id = @id
  AND (sqlc.narg(client_filter)::uuid IS NULL OR h.client_id = sqlc.narg(client_filter)::uuid);

-- name: ListHosts :many
SELECT h.id, h.client_id, h.environment_id, h.hostname, h.agent_id, h.revoked_at, h.agent_version,
       h.config_hash, h.config_version, h.config_versions, h.last_heartbeat_at, h.created_at,
       COALESCE((SELECT jsonb_object_agg(s.config_type, jsonb_build_object(
                   'version', s.version, 'status', s.status, 'error', s.error, 'applied_at', s.applied_at))
                 FROM host_config_apply_status s WHERE s.host_id = h.id), '{}'::jsonb)::jsonb AS apply_status,
       h.heartbeat_interval_ms,
       COALESCE((SELECT jsonb_object_agg(r.config_type, jsonb_build_object(
                   'version', r.version, 'attempts', r.attempts, 'first_at', r.first_at, 'last_at', r.last_at))
                 FROM config_repairs r WHERE r.host_id = h.id), '{}'::jsonb)::jsonb AS repairs
FROM hosts h
WHERE h.environment_id = @environment_id
  AND (sqlc.narg(after)::uuid IS NULL OR h.id > sqlc.narg(after)::uuid)
ORDER BY h.id
LIMIT @max_rows;

-- name: RevokeHost :one
UPDATE hosts SET revoked_at = COALESCE(revoked_at, now())
WHERE id = @id
  AND (sqlc.narg(client_filter)::uuid IS NULL OR client_id = sqlc.narg(client_filter)::uuid)
RETURNING id;

-- name: CountActiveHosts :one
SELECT count(*) FROM hosts WHERE environment_id = @environment_id AND revoked_at IS NULL;

-- name: ListActiveHostsWithOverride :many
-- A page of an environment's active hosts with their override of one type (if any), for dry runs.
SELECT h.id, h.hostname, h.agent_id, c.config_data AS override_data
FROM hosts h
LEFT JOIN host_configs c ON c.host_id = h.id AND c.config_type = @config_type
WHERE h.environment_id = @environment_id AND h.revoked_at IS NULL
ORDER BY h.hostname
LIMIT @max_rows;

-- name: ListRevokedNATSKeys :many
-- Every revoked agent's NATS user key, for the account's revocation list.
SELECT nats_public_key::text AS nats_public_key, revoked_at::timestamptz AS revoked_at
FROM hosts
WHERE revoked_at IS NOT NULL AND nats_public_key IS NOT NULL;

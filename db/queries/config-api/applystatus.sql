-- name: ApplyStatusEnvironmentLayer :one
-- The environment level of one config type (a tombstone included): its version, whether it holds data
-- and when that version was written.
SELECT version, (config_data IS NOT NULL)::boolean AS present, updated_at
FROM environment_configs
WHERE environment_id = @environment_id AND config_type = @config_type;

-- name: ApplyStatusHosts :many
-- Every active host of an environment (or the one host_id) with what apply status needs for one config
-- type: liveness inputs, both layers' versions and write times, and the host's last ack. Which host
-- should run which version, and which host is online, is decided in Go (agentconfig.Expected,
-- protocol.Online), not here.
SELECT h.id, h.last_heartbeat_at, COALESCE(h.heartbeat_interval_ms, 0)::bigint AS heartbeat_interval_ms,
       COALESCE(ec.version, 0)::bigint AS env_version, (ec.config_data IS NOT NULL)::boolean AS env_present,
       ec.updated_at AS env_written_at,
       COALESCE(hc.version, 0)::bigint AS host_version, (hc.config_data IS NOT NULL)::boolean AS host_present,
       hc.updated_at AS host_written_at,
       COALESCE(s.version, 0)::bigint AS ack_version, COALESCE(s.status, '')::text AS ack_status,
       COALESCE(s.error, '')::text AS ack_error, s.applied_at AS ack_applied_at
FROM hosts h
LEFT JOIN environment_configs ec ON ec.environment_id = h.environment_id AND ec.config_type = @config_type
LEFT JOIN host_configs hc ON hc.host_id = h.id AND hc.config_type = @config_type
LEFT JOIN host_config_apply_status s ON s.host_id = h.id AND s.config_type = @config_type
WHERE h.environment_id = @environment_id AND h.revoked_at IS NULL
  AND (sqlc.narg(host_id)::uuid IS NULL OR h.id = sqlc.narg(host_id)::uuid);

-- name: ApplyStatusStagedLayers :many
-- The environment layers of one config type that staged rollouts give hosts of an environment (or the
-- one host_id): rollout_layers, the rule every reader follows. Each replaces the environment's row for
-- its host in what ApplyStatusHosts returns; a staged layer was "written" when the host joined.
SELECT l.host_id, l.version, l.joined_at
FROM rollout_layers l
WHERE l.config_type = @config_type
  AND l.host_id = ANY (ARRAY(SELECT hs.id FROM hosts hs WHERE hs.environment_id = @environment_id AND hs.revoked_at IS NULL
                             AND (sqlc.narg(host_id)::uuid IS NULL OR hs.id = sqlc.narg(host_id)::uuid)));

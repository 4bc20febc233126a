-- name: HostByID :one
-- A host that can receive configs: revoked hosts are treated as absent.
SELECT id, client_id, environment_id, agent_id
FROM hosts
WHERE id = @id AND revoked_at IS NULL;

-- name: HostByAgentID :one
SELECT id, client_id, environment_id, agent_id
FROM hosts
WHERE agent_id = @agent_id AND revoked_at IS NULL;

-- name: HostLayers :many
-- Both levels of the given types for one host, tombstones included (config_data NULL).
SELECT 'environment'::text AS level, config_type, config_data, version
FROM environment_configs
WHERE environment_id = @environment_id AND config_type = ANY (@config_types::text[])
UNION ALL
SELECT 'host'::text AS level, config_type, config_data, version
FROM host_configs
WHERE host_id = @host_id AND config_type = ANY (@config_types::text[]);

-- name: BatchEnvironment :one
-- The environment (for its client) and its row of one type, if any (version NULL = no row).
SELECT e.client_id, ec.config_data, ec.version
FROM environments e
LEFT JOIN environment_configs ec ON ec.environment_id = e.id AND ec.config_type = @config_type
WHERE e.id = @environment_id;

-- name: BatchHostPage :many
-- One page of an environment's non-revoked hosts in id order, each with its override row of one type
-- (override_version NULL = no row; config_data NULL with a version = tombstone).
SELECT h.id, h.agent_id, hc.config_data AS override_data, hc.version AS override_version
FROM hosts h
LEFT JOIN host_configs hc ON hc.host_id = h.id AND hc.config_type = @config_type
WHERE h.environment_id = @environment_id
  AND h.revoked_at IS NULL
  AND h.id > @after::uuid
  AND (NOT @filter_hosts::bool OR h.id = ANY (@host_ids::uuid[]))
  AND (sqlc.narg('online_since')::timestamptz IS NULL OR h.last_heartbeat_at >= sqlc.narg('online_since')::timestamptz)
ORDER BY h.id
LIMIT @page_limit;

-- name: LookupHostIDs :many
-- Maps agent ids to host ids; unknown agents are simply absent from the result.
SELECT agent_id, id
FROM hosts
WHERE agent_id = ANY(@agent_ids::text[]);

-- name: UpsertApplyStatuses :execrows
-- Writes one batch of apply results (parallel arrays unnested in lockstep). The caller dedupes the batch
-- per (host_id, config_type) and sorts it, so no row is touched twice and concurrent batches lock rows
-- in the same order. An older version never overwrites a newer one; the same version does (a retried
-- apply may turn "failed" into "applied").
INSERT INTO host_config_apply_status AS s (host_id, config_type, version, status, error, applied_at, updated_at)
SELECT v.host_id, v.config_type, v.version, v.status, NULLIF(v.error, ''), v.applied_at, now()
FROM (
    SELECT unnest(@host_ids::uuid[]) AS host_id,
           unnest(@config_types::text[]) AS config_type,
           unnest(@versions::bigint[]) AS version,
           unnest(@statuses::text[]) AS status,
           unnest(@errors::text[]) AS error,
           unnest(@applied_ats::timestamptz[]) AS applied_at
) AS v
ON CONFLICT (host_id, config_type) DO UPDATE
SET version    = excluded.version,
    status     = excluded.status,
    error      = excluded.error,
    applied_at = excluded.applied_at,
    updated_at = excluded.updated_at
WHERE excluded.version >= s.version;

-- name: UpdateHeartbeats :execrows
-- Writes one batch of heartbeats (deduped per host and sorted by the caller). last_heartbeat_at never
-- moves backwards: an older heartbeat (say, redelivered after a restart) changes nothing.
UPDATE hosts AS h
SET agent_version     = v.agent_version,
    config_hash       = v.config_hash,
    config_version    = v.config_version,
    config_versions   = v.config_versions,
    last_heartbeat_at = v.received_at
FROM (
    SELECT unnest(@host_ids::uuid[]) AS host_id,
           unnest(@agent_versions::text[]) AS agent_version,
           unnest(@config_hashes::text[]) AS config_hash,
           unnest(@config_version_values::bigint[]) AS config_version,
           unnest(@config_versions_json::jsonb[]) AS config_versions,
           unnest(@received_ats::timestamptz[]) AS received_at
) AS v
WHERE h.id = v.host_id
  AND (h.last_heartbeat_at IS NULL OR h.last_heartbeat_at <= v.received_at);

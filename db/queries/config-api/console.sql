-- Read models of the web console (fleet summary, host search, apply progress), its sessions, and the
-- audit log read.

-- name: CreateConsoleSession :exec
INSERT INTO console_sessions (id_hash, token_id, expires_at) VALUES (@id_hash, @token_id, @expires_at);

-- name: GetConsoleSession :one
-- A session is valid while it has not expired and its API token is not revoked.
SELECT t.id AS token_id, t.name, t.client_id, s.expires_at
FROM console_sessions s
JOIN api_tokens t ON t.id = s.token_id
WHERE s.id_hash = @id_hash AND s.expires_at > now() AND t.revoked_at IS NULL;

-- name: DeleteConsoleSession :exec
DELETE FROM console_sessions WHERE id_hash = @id_hash;

-- name: DeleteExpiredConsoleSessions :execrows
DELETE FROM console_sessions WHERE expires_at <= now();

-- name: EnvironmentHostSummary :one
-- Counts of an environment's hosts by state, in one pass (online: host_online, the SQL form of
-- protocol.Online), with the environment's last stored fleet stats (drifted and stale hosts, computed
-- periodically by the fleet metrics lease holder; NULL before the first computation). Failed applies come
-- from the partial index of failed rows, joined once (not probed per host).
WITH failed AS (
    SELECT DISTINCT s.host_id
    FROM host_config_apply_status s JOIN hosts f ON f.id = s.host_id
    WHERE s.status = 'failed' AND f.environment_id = @environment_id
),
counts AS (
    SELECT count(*) FILTER (WHERE h.revoked_at IS NULL)::bigint AS active,
           count(*) FILTER (WHERE h.revoked_at IS NULL AND host_online(h.last_heartbeat_at, h.heartbeat_interval_ms, @online_window::interval, statement_timestamp()))::bigint AS online,
           count(*) FILTER (WHERE h.revoked_at IS NULL AND h.last_heartbeat_at IS NULL)::bigint AS never_seen,
           count(*) FILTER (WHERE h.revoked_at IS NULL AND failed.host_id IS NOT NULL)::bigint AS failed,
           count(*) FILTER (WHERE h.revoked_at IS NOT NULL)::bigint AS revoked
    FROM hosts h
    LEFT JOIN failed ON failed.host_id = h.id
    WHERE h.environment_id = @environment_id
)
SELECT c.active, c.online, c.never_seen, c.failed, c.revoked,
       st.drifted AS stats_drifted, st.stale AS stats_stale, st.online AS stats_online, st.computed_at AS stats_at
FROM counts c
LEFT JOIN environment_fleet_stats st ON st.environment_id = @environment_id;

-- name: EnvironmentWorstHosts :many
-- The active hosts of an environment that most need attention: most failed config types first, then the
-- oldest (or missing) heartbeat.
WITH failed AS (
    SELECT s.host_id, count(*) AS types
    FROM host_config_apply_status s JOIN hosts f ON f.id = s.host_id
    WHERE s.status = 'failed' AND f.environment_id = @environment_id
    GROUP BY s.host_id
)
SELECT h.id, h.hostname, h.last_heartbeat_at, COALESCE(failed.types, 0)::bigint AS failed_types
FROM hosts h
LEFT JOIN failed ON failed.host_id = h.id
WHERE h.environment_id = @environment_id AND h.revoked_at IS NULL
  AND (NOT host_online(h.last_heartbeat_at, h.heartbeat_interval_ms, @online_window::interval, statement_timestamp()) OR failed.host_id IS NOT NULL)
ORDER BY failed_types DESC, h.last_heartbeat_at ASC NULLS FIRST, h.hostname
LIMIT @max_rows;

-- name: SearchHosts :many
-- A page of an environment's hosts by hostname (then id), filtered by a hostname substring and a state:
-- '' (all), 'online', 'offline' (active, no recent heartbeat), 'failed' (an apply failed), 'drifted'
-- (online, some reported per-type version differs from the effective one: host_version_drift, the rule
-- the overview's drifted count uses), 'revoked'.
SELECT h.* FROM host_details h
WHERE h.environment_id = @environment_id
  AND (@hostname_like::text = '' OR h.hostname ILIKE '%' || @hostname_like::text || '%')
  AND (sqlc.narg(after_hostname)::text IS NULL
       OR (h.hostname, h.id) > (sqlc.narg(after_hostname)::text, sqlc.narg(after_id)::uuid))
  AND CASE @state::text
        WHEN 'online' THEN h.revoked_at IS NULL AND host_online(h.last_heartbeat_at, h.heartbeat_interval_ms, @online_window::interval, statement_timestamp())
        WHEN 'offline' THEN h.revoked_at IS NULL AND NOT host_online(h.last_heartbeat_at, h.heartbeat_interval_ms, @online_window::interval, statement_timestamp())
        WHEN 'failed' THEN h.revoked_at IS NULL AND EXISTS (
            SELECT 1 FROM host_config_apply_status s WHERE s.host_id = h.id AND s.status = 'failed')
        WHEN 'drifted' THEN h.revoked_at IS NULL
            AND host_online(h.last_heartbeat_at, h.heartbeat_interval_ms, @online_window::interval, statement_timestamp())
            AND CASE WHEN EXISTS (SELECT 1 FROM host_configs hc WHERE hc.host_id = h.id)
                       OR EXISTS (SELECT 1 FROM rollout_hosts rh WHERE rh.host_id = h.id)
                     THEN host_version_drift(h.id, h.environment_id, h.config_versions) IS NOT NULL
                     -- Without rows of its own (nor a rollout that reached it), a host's effective
                     -- versions are the environment's live rows, and host_version_drift is NULL exactly
                     -- when its report contains them: one containment test (the environment's side
                     -- computed once), not a call per host.
                     ELSE NOT COALESCE(h.config_versions, '{}'::jsonb) @> (
                         SELECT COALESCE(jsonb_object_agg(ec.config_type, ec.version), '{}'::jsonb)
                         FROM environment_configs ec
                         WHERE ec.environment_id = @environment_id AND ec.deleted_at IS NULL)
                END
        WHEN 'revoked' THEN h.revoked_at IS NOT NULL
        ELSE true
      END
ORDER BY h.hostname, h.id
LIMIT @max_rows;

-- name: ListAuditEvents :many
-- A page of the audit log, newest first, restricted to one client unless client_filter is NULL (admin).
SELECT id, actor, client_id, action, object, detail, created_at
FROM audit_events
WHERE (sqlc.narg(client_filter)::uuid IS NULL OR client_id = sqlc.narg(client_filter)::uuid)
  AND (@actor::text = '' OR actor = @actor::text)
  AND (@object::text = '' OR object = @object::text)
  AND (sqlc.narg(since)::timestamptz IS NULL OR created_at >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(until)::timestamptz IS NULL OR created_at < sqlc.narg(until)::timestamptz)
  AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id)::bigint)
ORDER BY id DESC
LIMIT @max_rows;

-- name: FleetSummary :many
-- Every environment the caller can see (client_filter NULL: all) with its hosts counted by state, in one
-- query whatever the number of environments, and its last stored fleet stats (NULL before the first).
WITH failed AS (
    SELECT DISTINCT s.host_id FROM host_config_apply_status s WHERE s.status = 'failed'
)
SELECT e.id AS environment_id, e.name AS environment_name, e.client_id, c.name AS client_name, e.created_at,
       count(h.id) FILTER (WHERE h.revoked_at IS NULL)::bigint AS active,
       count(h.id) FILTER (WHERE h.revoked_at IS NULL AND host_online(h.last_heartbeat_at, h.heartbeat_interval_ms, @online_window::interval, statement_timestamp()))::bigint AS online,
       count(h.id) FILTER (WHERE h.revoked_at IS NULL AND h.last_heartbeat_at IS NULL)::bigint AS never_seen,
       count(h.id) FILTER (WHERE h.revoked_at IS NULL AND failed.host_id IS NOT NULL)::bigint AS failed,
       count(h.id) FILTER (WHERE h.revoked_at IS NOT NULL)::bigint AS revoked,
       st.drifted AS stats_drifted, st.stale AS stats_stale, st.online AS stats_online, st.computed_at AS stats_at
FROM environments e
JOIN clients c ON c.id = e.client_id
LEFT JOIN environment_fleet_stats st ON st.environment_id = e.id
LEFT JOIN hosts h ON h.environment_id = e.id
LEFT JOIN failed ON failed.host_id = h.id
WHERE sqlc.narg(client_filter)::uuid IS NULL OR e.client_id = sqlc.narg(client_filter)::uuid
GROUP BY e.id, c.name, st.environment_id
ORDER BY c.name, e.name;

-- name: FleetWorstHosts :many
-- The worst offenders of every environment the caller can see, at most per_env each, ranked as
-- EnvironmentWorstHosts ranks them (a top-N per environment, not a sort of every offender).
WITH failed AS (
    SELECT s.host_id, count(*) AS types FROM host_config_apply_status s WHERE s.status = 'failed' GROUP BY s.host_id
)
SELECT e.id AS environment_id, w.id, w.hostname, w.last_heartbeat_at, w.failed_types
FROM environments e
CROSS JOIN LATERAL (
    SELECT h.id, h.hostname, h.last_heartbeat_at, COALESCE(failed.types, 0)::bigint AS failed_types
    FROM hosts h
    LEFT JOIN failed ON failed.host_id = h.id
    WHERE h.environment_id = e.id AND h.revoked_at IS NULL
      AND (NOT host_online(h.last_heartbeat_at, h.heartbeat_interval_ms, @online_window::interval, statement_timestamp()) OR failed.host_id IS NOT NULL)
    ORDER BY failed_types DESC, h.last_heartbeat_at ASC NULLS FIRST, h.hostname
    LIMIT @per_env::bigint
) w
WHERE sqlc.narg(client_filter)::uuid IS NULL OR e.client_id = sqlc.narg(client_filter)::uuid;

-- name: ListVisibleEnvironments :many
-- Every environment the caller can see with its client's name, for the console's selectors.
SELECT e.id, e.name, e.client_id, c.name AS client_name
FROM environments e
JOIN clients c ON c.id = e.client_id
WHERE sqlc.narg(client_filter)::uuid IS NULL OR e.client_id = sqlc.narg(client_filter)::uuid
ORDER BY c.name, e.name;

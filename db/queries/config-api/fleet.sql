-- FleetTotals is the fleet as an on-call dashboard shows it, in one aggregate query (config-api's
-- fleet metrics run it once per period on the replica holding the lease, never per scrape): hosts not
-- revoked, those online (protocol.Online: a heartbeat at or after online_since, or within 3 of the host's own
-- heartbeat intervals), the online ones whose reported
-- per-type versions differ from the effective versions (max of the environment's and the host's row,
-- for every type with a live row at either level: the version part of drift), and the hosts and
-- (host, type) pairs whose last apply failed.
-- name: FleetTotals :one
WITH live AS MATERIALIZED (
    SELECT id, environment_id, config_versions,
           COALESCE(last_heartbeat_at >= @online_since::timestamptz
                    OR last_heartbeat_at + COALESCE(heartbeat_interval_ms, 0) * interval '3 milliseconds' >= statement_timestamp(), false) AS online
    FROM hosts
    WHERE revoked_at IS NULL
),
expected AS (
    SELECT l.id AS host_id, t.config_type, max(t.version)::bigint AS version
    FROM live l
    CROSS JOIN LATERAL (
        SELECT ec.config_type, ec.version, ec.deleted_at IS NULL AS present
        FROM environment_configs ec
        WHERE ec.environment_id = l.environment_id
        UNION ALL
        SELECT hc.config_type, hc.version, hc.deleted_at IS NULL
        FROM host_configs hc
        WHERE hc.host_id = l.id
    ) t
    WHERE l.online
    GROUP BY l.id, t.config_type
    HAVING bool_or(t.present)
)
SELECT
    (SELECT count(*) FROM live)::bigint AS hosts,
    (SELECT count(*) FROM live WHERE online)::bigint AS online,
    (SELECT count(DISTINCT e.host_id)
     FROM expected e JOIN live l ON l.id = e.host_id
     WHERE COALESCE((l.config_versions ->> e.config_type)::bigint, 0) <> e.version)::bigint AS drifted,
    (SELECT count(DISTINCT s.host_id)
     FROM host_config_apply_status s JOIN live l ON l.id = s.host_id
     WHERE s.status = 'failed')::bigint AS failed_hosts,
    (SELECT count(*)
     FROM host_config_apply_status s JOIN live l ON l.id = s.host_id
     WHERE s.status = 'failed')::bigint AS failed_applies;

-- RefreshEnvironmentFleetStats recomputes the fleet as an on-call dashboard shows it, per environment,
-- in one statement (config-api's fleet metrics lease holder runs it once per period, never per scrape or
-- page) and stores it in environment_fleet_stats: hosts not revoked, those online (host_online, the
-- SQL form of protocol.Online), the online ones whose reported per-type versions differ from the
-- effective versions (host_version_drift: the version part of drift) and those among them behind it
-- (stale), and the hosts and (host, type) pairs whose last apply failed. It returns every environment's row for the gauges.
-- name: RefreshEnvironmentFleetStats :many
WITH live AS MATERIALIZED (
    SELECT l.id, l.environment_id, l.online,
           CASE WHEN l.online THEN host_version_drift(l.id, l.environment_id, l.config_versions) END AS drift
    FROM (
        SELECT id, environment_id, config_versions,
               host_online(last_heartbeat_at, heartbeat_interval_ms, @online_window::interval, statement_timestamp()) AS online
        FROM hosts
        WHERE revoked_at IS NULL
    ) l
),
failed AS (
    SELECT s.host_id, count(*) AS types
    FROM host_config_apply_status s
    WHERE s.status = 'failed'
    GROUP BY s.host_id
),
totals AS (
    SELECT env.id AS environment_id,
           count(l.id) AS hosts,
           count(l.id) FILTER (WHERE l.online) AS online,
           count(l.id) FILTER (WHERE l.drift IS NOT NULL) AS drifted,
           count(l.id) FILTER (WHERE l.drift = 'behind') AS stale,
           count(f.host_id) AS failed_hosts,
           COALESCE(sum(f.types), 0) AS failed_applies
    FROM environments env
    LEFT JOIN live l ON l.environment_id = env.id
    LEFT JOIN failed f ON f.host_id = l.id
    GROUP BY env.id
)
INSERT INTO environment_fleet_stats AS st (environment_id, computed_at, hosts, online, drifted, stale, failed_hosts, failed_applies)
SELECT environment_id, statement_timestamp(), hosts, online, drifted, stale, failed_hosts, failed_applies
FROM totals
ON CONFLICT (environment_id) DO UPDATE
SET computed_at = excluded.computed_at, hosts = excluded.hosts, online = excluded.online,
    drifted = excluded.drifted, stale = excluded.stale, failed_hosts = excluded.failed_hosts,
    failed_applies = excluded.failed_applies
RETURNING st.environment_id, st.hosts, st.online, st.drifted, st.stale, st.failed_hosts, st.failed_applies;

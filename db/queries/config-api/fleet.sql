-- ListEnvironmentIDs lists every environment, for the fleet stats' drift pass.
-- name: ListEnvironmentIDs :many
SELECT id FROM environments ORDER BY id;

-- ReplaceHostDrift stores the drifted hosts of one environment as its drift report listed them (the
-- fleet stats' drift pass): the listed hosts of the environment get a row (stale or not), every other
-- row of the environment goes. Ids of hosts deleted or moved meanwhile are ignored.
-- name: ReplaceHostDrift :exec
WITH listed AS (
    SELECT d.host_id, d.stale
    FROM (SELECT unnest(@host_ids::uuid[]) AS host_id, unnest(@stale::boolean[]) AS stale) AS d
    JOIN hosts h ON h.id = d.host_id AND h.environment_id = @environment_id
),
gone AS (
    DELETE FROM host_drift x
    WHERE x.environment_id = @environment_id AND x.host_id NOT IN (SELECT host_id FROM listed)
)
INSERT INTO host_drift AS hd (host_id, environment_id, stale, computed_at)
SELECT host_id, @environment_id, stale, statement_timestamp() FROM listed
ON CONFLICT (host_id) DO UPDATE SET environment_id = excluded.environment_id, stale = excluded.stale,
    computed_at = excluded.computed_at;

-- RefreshEnvironmentFleetStats recomputes the fleet as an on-call dashboard shows it, per environment,
-- in one statement (config-api's fleet metrics lease holder runs it once per period, after the drift
-- pass, never per scrape or page) and stores it in environment_fleet_stats: hosts not revoked, those
-- online (host_online, the SQL form of protocol.Online), those the drift report listed as drifted
-- (host_drift, stored by the drift pass just before) and those among them behind (stale), and the
-- hosts and (host, type) pairs whose last apply failed. It returns every environment's row for the
-- gauges.
-- name: RefreshEnvironmentFleetStats :many
WITH live AS (
    SELECT h.id, h.environment_id,
           host_online(h.last_heartbeat_at, h.heartbeat_interval_ms, @online_window::interval, statement_timestamp()) AS online,
           d.host_id IS NOT NULL AS drifted, COALESCE(d.stale, false) AS stale
    FROM hosts h
    LEFT JOIN host_drift d ON d.host_id = h.id
    WHERE h.revoked_at IS NULL
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
           count(l.id) FILTER (WHERE l.drifted) AS drifted,
           count(l.id) FILTER (WHERE l.stale) AS stale,
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

-- +goose Up
-- host_online is protocol.Online in SQL, the one liveness rule of every query: a host is online at `at`
-- when its last heartbeat is at most the deployment's online window old, or at most 3
-- (protocol.OnlineHeartbeats) of its own reported heartbeat intervals old when that is longer; never
-- seen is offline. IMMUTABLE and a single expression, so the planner inlines it into the calling query.
-- A test in config-api checks it against protocol.Online.
-- +goose StatementBegin
CREATE FUNCTION host_online(last_heartbeat_at timestamptz, heartbeat_interval_ms bigint, online_window interval, at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT COALESCE($1 + GREATEST($3, COALESCE($2, 0) * interval '3 milliseconds') >= $4, false)
$$;
-- +goose StatementEnd

-- host_version_drift is the version part of drift for one host: over every config type with a live row
-- at the environment or host level, the effective version is the larger of the two rows' versions, and
-- the host's reported version (config_versions, 0 when missing) is compared with it. 'behind' when some
-- reported version is lower (the host is stale), 'differs' when some differs otherwise, NULL when all
-- agree. The fleet stats refresh and the console's "drifted" host filter both use it, so the overview's
-- count and the filtered list agree. (The full drift report also compares the config hash, which needs
-- the resolver: package drift.)
-- +goose StatementBegin
CREATE FUNCTION host_version_drift(host_id uuid, environment_id uuid, config_versions jsonb)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN bool_or(x.reported < x.version) THEN 'behind'
                WHEN bool_or(x.reported <> x.version) THEN 'differs' END
    FROM (
        SELECT max(t.version) AS version, COALESCE(($3 ->> t.config_type)::bigint, 0) AS reported
        FROM (
            SELECT ec.config_type, ec.version, ec.deleted_at IS NULL AS present
            FROM environment_configs ec
            WHERE ec.environment_id = $2
            UNION ALL
            SELECT hc.config_type, hc.version, hc.deleted_at IS NULL
            FROM host_configs hc
            WHERE hc.host_id = $1
        ) t
        GROUP BY t.config_type
        HAVING bool_or(t.present)
    ) x
$$;
-- +goose StatementEnd

-- host_details is a host as the API and the console read it: its row with its per-type apply status and
-- repair state as JSON objects, and its inventory labels. GetHost, ListHosts and the console's SearchHosts select from it, so the
-- list is written once and sqlc gives them one row type.
CREATE VIEW host_details AS
SELECT h.id, h.client_id, h.environment_id, h.hostname, h.agent_id, h.revoked_at, h.agent_version,
       h.config_hash, h.config_version, h.config_versions, h.last_heartbeat_at, h.created_at, h.nats_expires_at,
       COALESCE((SELECT jsonb_object_agg(s.config_type, jsonb_build_object(
                   'version', s.version, 'status', s.status, 'error', s.error, 'applied_at', s.applied_at))
                 FROM host_config_apply_status s WHERE s.host_id = h.id), '{}'::jsonb)::jsonb AS apply_status,
       h.heartbeat_interval_ms,
       COALESCE((SELECT jsonb_object_agg(r.config_type, jsonb_build_object(
                   'version', r.version, 'attempts', r.attempts, 'first_at', r.first_at, 'last_at', r.last_at))
                 FROM config_repairs r WHERE r.host_id = h.id), '{}'::jsonb)::jsonb AS repairs,
       h.inventory_labels
FROM hosts h;

-- Per-environment fleet figures that need every host's effective versions (drifted, stale), computed
-- once per period by the config-api replica holding the fleet metrics lease and read by the console's
-- overview with their computed_at ("as of"): no page walks an environment's hosts to show them. The
-- fleet gauges are the sums of these rows.
CREATE TABLE environment_fleet_stats (
    environment_id uuid PRIMARY KEY REFERENCES environments (id) ON DELETE CASCADE,
    computed_at    timestamptz NOT NULL,
    hosts          bigint NOT NULL, -- not revoked
    online         bigint NOT NULL,
    drifted        bigint NOT NULL, -- online, some reported per-type version differs from the effective one
    stale          bigint NOT NULL, -- online, some reported per-type version is behind the effective one
    failed_hosts   bigint NOT NULL,
    failed_applies bigint NOT NULL
);

-- +goose Down
DROP VIEW IF EXISTS host_details;
DROP FUNCTION IF EXISTS host_version_drift(uuid, uuid, jsonb);
DROP TABLE IF EXISTS environment_fleet_stats;
DROP FUNCTION IF EXISTS host_online(timestamptz, bigint, interval, timestamptz);

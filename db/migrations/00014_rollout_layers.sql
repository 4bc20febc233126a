-- +goose Up
-- rollout_layers is the one rule of staged rollouts (issue 18): per host, the environment layer a
-- rollout gives it, per config type, where one does; for every other (host, type) the
-- environment's own row is the layer, as before. Every query that decides what a host should hold
-- (the resolver's reads, ack-ingest's anti-entropy, config-api's apply status and drift, the fleet
-- stats) takes a host's environment layer from here first, so they cannot disagree.
--
-- A host's layer comes from the newest rollout_hosts row of the type whose rollout is either active
-- (running or paused: the host is in a started stage) or completed and still the source of the
-- environment row (final_version = the row's version: the members keep the versions they got, so a
-- completion moves no host). Any later write of the environment row (a PUT, a revert) ends the latter.
-- The data is the rollout's. config_data is never NULL (a rollout never deletes). rollout_memberships
-- is the valid memberships, rollout_layers the newest per (host, type). Both are plain views (no
-- DISTINCT, no aggregate), so PostgreSQL flattens them into the calling query: callers restrict them
-- by host_id and every access is an index lookup on rollout_hosts (host_id), never a sort nor a scan.
CREATE VIEW rollout_memberships AS
SELECT rh.host_id, r.config_type, rh.version, r.config_data, rh.joined_at
FROM rollout_hosts rh
JOIN rollouts r ON r.id = rh.rollout_id
WHERE r.state IN ('running', 'paused')
   OR (r.state = 'completed' AND r.final_version = (
          SELECT ec.version FROM environment_configs ec
          WHERE ec.environment_id = r.environment_id AND ec.config_type = r.config_type));

CREATE VIEW rollout_layers AS
SELECT m.host_id, m.config_type, m.version, m.config_data, m.joined_at
FROM rollout_memberships m
WHERE NOT EXISTS (SELECT 1 FROM rollout_memberships n
                  WHERE n.host_id = m.host_id AND n.config_type = m.config_type AND n.version > m.version);

-- host_version_drift (00012) with each host's environment layer taken through rollout_layers.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION host_version_drift(host_id uuid, environment_id uuid, config_versions jsonb)
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
              AND NOT EXISTS (SELECT 1 FROM rollout_layers rl WHERE rl.host_id = $1 AND rl.config_type = ec.config_type)
            UNION ALL
            SELECT rl.config_type, rl.version, true
            FROM rollout_layers rl
            WHERE rl.host_id = $1
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION host_version_drift(host_id uuid, environment_id uuid, config_versions jsonb)
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
DROP VIEW IF EXISTS rollout_layers;
DROP VIEW IF EXISTS rollout_memberships;

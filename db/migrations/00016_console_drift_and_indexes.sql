-- +goose Up
-- host_drift: the hosts of each environment the drift report (package drift, GET
-- /api/v1/environments/{id}/drift) lists as drifted, as of the last fleet stats computation. Drift has one
-- rule, the report's (the expected config hash computed as the agent computes it, per-type versions,
-- failed applies, pending acks, repairs), which needs the resolver and cannot be a SQL expression; the
-- replica holding the fleet metrics lease runs the report for every environment once per period and
-- stores its drifted hosts here (stale: some type behind or not reported). The overview's drifted and
-- stale counts and the hosts page's status=drifted filter read these rows, so the console never calls a
-- host drifted by a rule of its own.
CREATE TABLE host_drift (
    host_id        uuid PRIMARY KEY REFERENCES hosts (id) ON DELETE CASCADE,
    environment_id uuid NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    stale          boolean NOT NULL,
    computed_at    timestamptz NOT NULL
);
CREATE INDEX host_drift_environment_idx ON host_drift (environment_id, host_id);

-- The version-only rule that host_drift replaces.
DROP FUNCTION host_version_drift(uuid, uuid, jsonb);

-- host_labels_match is a selector of inventory labels (libs/protocol/selector) in SQL, for the console's
-- host search: requirements is a JSON array of {"key", "op", "values"} with op one of = != in notin
-- exists ! (selector.Operator), all of which must hold; `!=` and `notin` also match hosts without the
-- key. A test in config-api checks it against selector.Matches over every operator.
-- +goose StatementBegin
CREATE FUNCTION host_labels_match(labels jsonb, requirements jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT NOT EXISTS (
        SELECT 1
        FROM jsonb_to_recordset($2) AS r(key text, op text, "values" text[])
        WHERE NOT CASE r.op
            WHEN '=' THEN COALESCE(($1 ->> r.key) = ANY (r."values"), false)
            WHEN 'in' THEN COALESCE(($1 ->> r.key) = ANY (r."values"), false)
            WHEN '!=' THEN NOT COALESCE(($1 ->> r.key) = ANY (r."values"), false)
            WHEN 'notin' THEN NOT COALESCE(($1 ->> r.key) = ANY (r."values"), false)
            WHEN 'exists' THEN $1 ? r.key
            WHEN '!' THEN NOT ($1 ? r.key)
            ELSE false
        END
    )
$$;
-- +goose StatementEnd

-- The console's audit log is filtered by actor and by object, newest first.
CREATE INDEX audit_events_actor_idx ON audit_events (actor, id);
CREATE INDEX audit_events_object_idx ON audit_events (object, id);

-- +goose Down
DROP FUNCTION IF EXISTS host_labels_match(jsonb, jsonb);
DROP INDEX IF EXISTS audit_events_object_idx;
DROP INDEX IF EXISTS audit_events_actor_idx;
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
DROP TABLE IF EXISTS host_drift;

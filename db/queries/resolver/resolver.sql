-- name: LayersByHostID :many
-- One non-revoked host with its config rows of the given types at both levels, in one round trip. The
-- rows come tagged by level; columns a level does not use hold zero values:
--   'host'         one row: the host (config_type '', version 0);
--   'override'     the host's rows of the types (host_id set; tombstones have config_data NULL);
--   'environment'  its environment's rows of the types (environment_id set).
--   'staged'       the host's environment layer of a type where a staged rollout gives it one
--                  (rollout_layers, migration 00014): it replaces the 'environment' row of that type.
-- No 'host' row means no such host. Every access is an index lookup by key, whatever the statistics.
WITH h AS MATERIALIZED (
    SELECT hs.id, hs.client_id, hs.environment_id, hs.agent_id
    FROM hosts hs
    WHERE hs.id = @host_id AND hs.revoked_at IS NULL
)
SELECT 'host'::text AS level, h.id AS host_id, h.client_id, h.environment_id, h.agent_id,
       ''::text AS config_type, NULL::jsonb AS config_data, 0::bigint AS version
FROM h
UNION ALL
SELECT 'override', hc.host_id, '00000000-0000-0000-0000-000000000000'::uuid, '00000000-0000-0000-0000-000000000000'::uuid, '',
       hc.config_type, hc.config_data, hc.version
FROM host_configs hc
WHERE hc.host_id = ANY (ARRAY(SELECT id FROM h)) AND hc.config_type = ANY (@config_types::text[])
UNION ALL
SELECT 'environment', '00000000-0000-0000-0000-000000000000'::uuid, '00000000-0000-0000-0000-000000000000'::uuid, ec.environment_id, '',
       ec.config_type, ec.config_data, ec.version
FROM environment_configs ec
WHERE ec.environment_id = ANY (ARRAY(SELECT environment_id FROM h)) AND ec.config_type = ANY (@config_types::text[])
UNION ALL
SELECT 'staged', rl.host_id, '00000000-0000-0000-0000-000000000000'::uuid, '00000000-0000-0000-0000-000000000000'::uuid, '',
       rl.config_type, rl.config_data, rl.version
FROM rollout_layers rl
WHERE rl.host_id = ANY (ARRAY(SELECT id FROM h)) AND rl.config_type = ANY (@config_types::text[]);

-- name: LayersByAgentID :many
-- LayersByHostID by agent id (a single resolve by agent). Its parameters are scalars, so PostgreSQL soon
-- settles on one generic plan for it instead of planning each request anew.
WITH h AS MATERIALIZED (
    SELECT hs.id, hs.client_id, hs.environment_id, hs.agent_id
    FROM hosts hs
    WHERE hs.agent_id = @agent_id AND hs.revoked_at IS NULL
)
SELECT 'host'::text AS level, h.id AS host_id, h.client_id, h.environment_id, h.agent_id,
       ''::text AS config_type, NULL::jsonb AS config_data, 0::bigint AS version
FROM h
UNION ALL
SELECT 'override', hc.host_id, '00000000-0000-0000-0000-000000000000'::uuid, '00000000-0000-0000-0000-000000000000'::uuid, '',
       hc.config_type, hc.config_data, hc.version
FROM host_configs hc
WHERE hc.host_id = ANY (ARRAY(SELECT id FROM h)) AND hc.config_type = ANY (@config_types::text[])
UNION ALL
SELECT 'environment', '00000000-0000-0000-0000-000000000000'::uuid, '00000000-0000-0000-0000-000000000000'::uuid, ec.environment_id, '',
       ec.config_type, ec.config_data, ec.version
FROM environment_configs ec
WHERE ec.environment_id = ANY (ARRAY(SELECT environment_id FROM h)) AND ec.config_type = ANY (@config_types::text[])
UNION ALL
SELECT 'staged', rl.host_id, '00000000-0000-0000-0000-000000000000'::uuid, '00000000-0000-0000-0000-000000000000'::uuid, '',
       rl.config_type, rl.config_data, rl.version
FROM rollout_layers rl
WHERE rl.host_id = ANY (ARRAY(SELECT id FROM h)) AND rl.config_type = ANY (@config_types::text[]);

-- name: FetchHostsByAgentIDs :many
-- The non-revoked hosts of the given agent ids (unknown ones are left out) with their own rows, in one
-- round trip, tagged by level as in LayersByHostID; but an 'environment' row carries only the version
-- of its environment's row, never its data (config_data is always NULL): the resolver keeps
-- environments' effective configs in memory, keyed by that version, and reads an environment's data
-- only when its cached version is not the current one. This version check is how every resolver
-- replica sees every write without listening to events. A 'staged' row (version only) is a host's
-- environment layer of a type given by a staged rollout (rollout_layers); its data is read by
-- RolloutLayerData and cached by version. A 'host' row also carries the host's stored identity
-- statement (NULL columns when it has none yet: signed at registration, else at its first fetch), so
-- a batch reads no identities apart. Every access is an index lookup by key (hosts by agent_id,
-- host_configs, environment_configs and host_identity_statements by primary key, rollout_hosts by host).
-- A host's own rows come in every type (the caller keeps those of the types it asked for; a fetch asks
-- for all): with the types as a second array key, the btree would probe each pair of host and type.
-- Ids come as text, the form the caller uses ('' where a level has none).
WITH h AS MATERIALIZED (
    SELECT hs.id, hs.client_id, hs.environment_id, hs.agent_id
    FROM hosts hs
    WHERE hs.agent_id = ANY (@agent_ids::text[]) AND hs.revoked_at IS NULL
)
SELECT 'host'::text AS level, h.id::text AS host_id, h.client_id::text AS client_id, h.environment_id::text AS environment_id,
       h.agent_id, ''::text AS config_type, NULL::jsonb AS config_data, 0::bigint AS version,
       his.statement AS identity_statement, his.key_id AS identity_key_id, his.signature AS identity_signature
FROM h
LEFT JOIN host_identity_statements his ON his.host_id = h.id
UNION ALL
SELECT 'override', hc.host_id::text, '', '', '', hc.config_type, hc.config_data, hc.version, NULL, NULL, NULL
FROM host_configs hc
WHERE hc.host_id = ANY (ARRAY(SELECT id FROM h))
UNION ALL
SELECT 'environment', '', '', ec.environment_id::text, '', ec.config_type, NULL::jsonb, ec.version, NULL, NULL, NULL
FROM environment_configs ec
WHERE ec.environment_id = ANY (ARRAY(SELECT DISTINCT environment_id FROM h)) AND ec.config_type = ANY (@config_types::text[])
UNION ALL
SELECT 'staged', rl.host_id::text, '', '', '', rl.config_type, NULL::jsonb, rl.version, NULL, NULL, NULL
FROM rollout_layers rl
WHERE rl.host_id = ANY (ARRAY(SELECT id FROM h)) AND rl.config_type = ANY (@config_types::text[]);

-- name: EnvironmentRows :many
-- The rows of the given types of the given environments (config_data NULL = tombstone): what
-- FetchHostsByAgentIDs found newer than the resolver's cache.
SELECT ec.environment_id, ec.config_type, ec.config_data, ec.version
FROM environment_configs ec
WHERE ec.environment_id = ANY (@environment_ids::uuid[]) AND ec.config_type = ANY (@config_types::text[]);

-- name: RolloutLayerData :many
-- The data of staged environment layers by (environment, type, version) (parallel arrays): the rollout
-- of that environment and type with the newest version at or below it. A rollout takes its stage
-- versions only while it is active and the next rollout of the type starts after it ended, so that
-- rollout is the one that gave the version.
SELECT k.environment_id::uuid AS environment_id, k.config_type::text AS config_type, k.version::bigint AS version, r.config_data
FROM (SELECT unnest(@environment_ids::uuid[]) AS environment_id, unnest(@config_types::text[]) AS config_type,
             unnest(@versions::bigint[]) AS version) AS k
CROSS JOIN LATERAL (
    SELECT ro.config_data
    FROM rollouts ro
    WHERE ro.environment_id = k.environment_id AND ro.config_type = k.config_type AND ro.version <= k.version
    ORDER BY ro.version DESC
    LIMIT 1
) AS r;

-- name: BatchEnvironment :one
-- The environment (for its client) and its row of one type, if any (version NULL = no row).
SELECT e.client_id, ec.config_data, ec.version
FROM environments e
LEFT JOIN environment_configs ec ON ec.environment_id = e.id AND ec.config_type = @config_type
WHERE e.id = @environment_id;

-- name: PlanOrderedPages :exec
-- Run in the page query's transaction, before it: no bitmap scans for the rest of the transaction.
-- Without statistics on hosts (right after a bulk registration, until autovacuum's first ANALYZE) the
-- planner estimates an environment at a few dozen hosts and, with bitmap scans allowed, reads every host
-- of the environment after the cursor and sorts them, for each page: quadratic in the environment's
-- size. Without them the only plans left are the ordered index scan of hosts_environment_idx, stopped
-- at the limit, and a sequential scan plus sort that costs more for any table where it matters. The
-- plan then no longer depends on statistics; with statistics the planner picks that index scan anyway.
SELECT set_config('enable_bitmapscan', 'off', true);

-- name: HostPage :many
-- One page of an environment's non-revoked hosts in id order, read in order from hosts_environment_idx
-- and stopped at the limit, with their rows of one type: a 'host' row per host (config columns zero),
-- then an 'override' row per host row of the type (config_data NULL = tombstone), looked up by key for
-- exactly the page's hosts, and a 'staged' row per host a staged rollout gives its own environment layer
-- of the type (rollout_layers; it replaces the environment's row for that host). Each host query comes in one variant per filter, so no catch-all predicate
-- blurs the planner's estimates.
WITH page AS MATERIALIZED (
    SELECT hs.id, hs.agent_id
    FROM hosts hs
    WHERE hs.environment_id = @environment_id AND hs.id > @after::uuid AND hs.revoked_at IS NULL
    ORDER BY hs.id
    LIMIT @page_limit
)
SELECT 'host'::text AS level, page.id AS host_id, page.agent_id, NULL::jsonb AS config_data, 0::bigint AS version
FROM page
UNION ALL
SELECT 'override', hc.host_id, '', hc.config_data, hc.version
FROM host_configs hc
WHERE hc.config_type = @config_type AND hc.host_id = ANY (ARRAY(SELECT id FROM page))
UNION ALL
SELECT 'staged', rl.host_id, '', rl.config_data, rl.version
FROM rollout_layers rl
WHERE rl.host_id = ANY (ARRAY(SELECT id FROM page)) AND rl.config_type = @config_type;

-- name: OnlineHostPage :many
-- HostPage restricted to the hosts online at online_at by host_online (migration 00012, protocol.Online
-- in SQL: the one liveness rule of every query) with the window online_window, by their own reported
-- heartbeat intervals too when own_intervals (else by the window alone). host_online is inlined, so the
-- plan stays the ordered scan of hosts_environment_idx with the rule as a filter.
WITH page AS MATERIALIZED (
    SELECT hs.id, hs.agent_id
    FROM hosts hs
    WHERE hs.environment_id = @environment_id AND hs.id > @after::uuid AND hs.revoked_at IS NULL
      AND host_online(hs.last_heartbeat_at, CASE WHEN @own_intervals::boolean THEN hs.heartbeat_interval_ms END,
                      @online_window::interval, @online_at::timestamptz)
    ORDER BY hs.id
    LIMIT @page_limit
)
SELECT 'host'::text AS level, page.id AS host_id, page.agent_id, NULL::jsonb AS config_data, 0::bigint AS version
FROM page
UNION ALL
SELECT 'override', hc.host_id, '', hc.config_data, hc.version
FROM host_configs hc
WHERE hc.config_type = @config_type AND hc.host_id = ANY (ARRAY(SELECT id FROM page))
UNION ALL
SELECT 'staged', rl.host_id, '', rl.config_data, rl.version
FROM rollout_layers rl
WHERE rl.host_id = ANY (ARRAY(SELECT id FROM page)) AND rl.config_type = @config_type;

-- name: ListedHostPage :many
-- HostPage restricted to the listed hosts (ids of other environments are ignored), optionally online
-- only (online_at set, then as OnlineHostPage). The page is found through the primary key, one lookup
-- per listed id, so its cost is bounded by the list whatever the plan.
WITH page AS MATERIALIZED (
    SELECT hs.id, hs.agent_id
    FROM hosts hs
    WHERE hs.id = ANY (@host_ids::uuid[]) AND hs.environment_id = @environment_id AND hs.id > @after::uuid
      AND hs.revoked_at IS NULL
      AND (sqlc.narg('online_at')::timestamptz IS NULL
           OR host_online(hs.last_heartbeat_at, CASE WHEN @own_intervals::boolean THEN hs.heartbeat_interval_ms END,
                          @online_window::interval, sqlc.narg('online_at')::timestamptz))
    ORDER BY hs.id
    LIMIT @page_limit
)
SELECT 'host'::text AS level, page.id AS host_id, page.agent_id, NULL::jsonb AS config_data, 0::bigint AS version
FROM page
UNION ALL
SELECT 'override', hc.host_id, '', hc.config_data, hc.version
FROM host_configs hc
WHERE hc.config_type = @config_type AND hc.host_id = ANY (ARRAY(SELECT id FROM page))
UNION ALL
SELECT 'staged', rl.host_id, '', rl.config_data, rl.version
FROM rollout_layers rl
WHERE rl.host_id = ANY (ARRAY(SELECT id FROM page)) AND rl.config_type = @config_type;

-- name: ConfigStatements :many
-- The stored signed statements of the given (scope, config_type, version) keys (parallel arrays
-- unnested in lockstep), in one round trip.
SELECT s.scope, s.config_type, s.version, s.statement, s.key_id, s.signature
FROM (SELECT unnest(@scopes::text[]) AS scope, unnest(@config_types::text[]) AS config_type,
             unnest(@versions::bigint[]) AS version) AS k
JOIN config_statements s ON s.scope = k.scope AND s.config_type = k.config_type AND s.version = k.version;

-- name: SaveConfigStatements :exec
-- Stores newly signed statements. A key another replica stored meanwhile keeps its row: both
-- signatures are valid for the same statement.
INSERT INTO config_statements (scope, config_type, version, statement, key_id, signature)
SELECT v.scope, v.config_type, v.version, v.statement, v.key_id, v.signature
FROM (SELECT unnest(@scopes::text[]) AS scope, unnest(@config_types::text[]) AS config_type,
             unnest(@versions::bigint[]) AS version, unnest(@statements::bytea[]) AS statement,
             unnest(@key_ids::text[]) AS key_id, unnest(@signatures::bytea[]) AS signature) AS v
ON CONFLICT DO NOTHING;

-- name: PruneConfigStatements :execrows
-- Deletes up to @max_rows stored statements created before @before that can no longer be served: a
-- newer version of the same scope and type is stored (versions come from one sequence, so the older
-- one is superseded), or the scope is an agent whose host no longer exists. A statement asked for
-- again after all (a host held back on an older revision) is signed again, once per retention.
DELETE FROM config_statements
WHERE (scope, config_type, version) IN (
    SELECT s.scope, s.config_type, s.version
    FROM config_statements s
    WHERE s.created_at < @before::timestamptz
      AND (EXISTS (SELECT 1 FROM config_statements n
                   WHERE n.scope = s.scope AND n.config_type = s.config_type AND n.version > s.version)
           OR (s.scope LIKE 'agent:%'
               AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.agent_id = substr(s.scope, length('agent:') + 1))))
    LIMIT @max_rows::int);

-- name: SaveIdentityStatements :exec
INSERT INTO host_identity_statements (host_id, statement, key_id, signature)
SELECT v.host_id, v.statement, v.key_id, v.signature
FROM (SELECT unnest(@host_ids::uuid[]) AS host_id, unnest(@statements::bytea[]) AS statement,
             unnest(@key_ids::text[]) AS key_id, unnest(@signatures::bytea[]) AS signature) AS v
ON CONFLICT DO NOTHING;

-- name: CredentialFields :many
-- The secret field names (metadata, never values) of a client's credentials: what a collectors config
-- looks like once injected and redacted, the form its statement hashes.
SELECT id, fields
FROM credentials
WHERE client_id = @client_id AND id = ANY (@ids::uuid[]);

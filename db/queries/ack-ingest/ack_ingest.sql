-- name: LookupHostIDs :many
-- Maps agent ids to host ids and environments (a host never changes environment); unknown agents are
-- simply absent from the result.
SELECT agent_id, id, environment_id
FROM hosts
WHERE agent_id = ANY(@agent_ids::text[]);

-- name: UpsertApplyStatuses :execrows
-- Writes one batch of apply results (parallel arrays unnested in lockstep). The caller dedupes the batch
-- per (host_id, config_type) and sorts it, so no row is touched twice and concurrent batches lock rows
-- in the same order. An older version never overwrites a newer one; of two acks of the same version the
-- later one in the ack stream wins (a retried apply may turn "failed" into "applied", and an agent that
-- sent "failed" then "applied" ends "applied" whichever writer commits first). Revoked hosts are
-- skipped (the caller drops their acks before; this closes the race with a revocation meanwhile).
INSERT INTO host_config_apply_status AS s (host_id, config_type, version, status, error, applied_at, updated_at, ack_seq)
SELECT v.host_id, v.config_type, v.version, v.status, NULLIF(v.error, ''), v.applied_at, now(), v.ack_seq
FROM (
    SELECT unnest(@host_ids::uuid[]) AS host_id,
           unnest(@config_types::text[]) AS config_type,
           unnest(@versions::bigint[]) AS version,
           unnest(@statuses::text[]) AS status,
           unnest(@errors::text[]) AS error,
           unnest(@applied_ats::timestamptz[]) AS applied_at,
           unnest(@ack_seqs::bigint[]) AS ack_seq
) AS v
JOIN hosts h ON h.id = v.host_id AND h.revoked_at IS NULL
ORDER BY v.host_id, v.config_type
ON CONFLICT (host_id, config_type) DO UPDATE
SET version    = excluded.version,
    status     = excluded.status,
    error      = excluded.error,
    applied_at = excluded.applied_at,
    updated_at = excluded.updated_at,
    ack_seq    = excluded.ack_seq
WHERE excluded.version > s.version
   OR (excluded.version = s.version AND excluded.ack_seq >= s.ack_seq);

-- name: UpdateHeartbeats :many
-- Writes one batch of heartbeats (deduped per host and sorted by the caller; parallel arrays unnested
-- in lockstep) into hosts and returns, in the same statement, what anti-entropy needs: how many hosts
-- were written ('written', in version), then the versions (and whether they hold data) of the config
-- rows of the hosts written and of the given environments (theirs), with when each was written, and
-- the open repairs — never any config data. One statement, one implicit transaction: a batch costs
-- one round trip and one commit (a COPY into a temporary table took five round trips, the table's
-- truncation at every commit and a scan of every host, see below, for no measurable gain per row).
-- host_ids also bound the UPDATE (h.id = ANY): hosts is then read through hosts_pkey for exactly the
-- batch's rows whatever the planner guesses about the unnested rows (with a temporary table of unknown
-- size it read and hashed every host for each batch: 54% of PostgreSQL's CPU in a 10,000-agent herd).
-- The written hosts' override and repair rows are read with host_id = ANY (ARRAY(SELECT id FROM upd)):
-- one index scan over the batch's sorted ids. `IN (SELECT id FROM upd)` made a hash of the ids and one
-- index probe per host (a nested loop of 1,000 for a batch of 1,000): 40% of the statement's time
-- in EXPLAIN ANALYZE, and about a third of PostgreSQL's CPU per heartbeat (BenchmarkUpdateHeartbeats).
-- last_heartbeat_at never moves backwards: an older heartbeat (say, redelivered after a restart)
-- changes nothing; revoked hosts are not written. Rows are tagged:
--   'written'      one row: the count of hosts written;
--   'override'     the written hosts' rows (host_id set; flag false = tombstone);
--   'environment'  the environments' rows (environment_id set);
--   'repair'       the written hosts' open repairs (config_repairs: version, attempts, next_at);
--   'staged'       a written host's environment layer of a type given by a staged rollout
--                  (rollout_layers, migration 00014): it replaces the 'environment' row of that type for
--                  that host, so anti-entropy never repairs a host outside a started stage to the new
--                  revision (nor one inside back to the old).
-- agentconfig.Expected turns the layers into what each host should hold, the rule the resolver
-- follows too.
WITH v AS (
    SELECT unnest(@host_ids::uuid[]) AS host_id,
           unnest(@agent_versions::text[]) AS agent_version,
           unnest(@config_hashes::text[]) AS config_hash,
           unnest(@config_version_values::bigint[]) AS config_version,
           unnest(@config_versions_json::jsonb[]) AS config_versions,
           unnest(@received_ats::timestamptz[]) AS received_at,
           unnest(@heartbeat_intervals_ms::bigint[]) AS heartbeat_interval_ms
), upd AS (
    UPDATE hosts AS h
    SET agent_version     = v.agent_version,
        config_hash       = v.config_hash,
        config_version    = v.config_version,
        config_versions   = v.config_versions,
        last_heartbeat_at = v.received_at,
        heartbeat_interval_ms = NULLIF(v.heartbeat_interval_ms, 0)
    FROM v
    WHERE h.id = ANY (@host_ids::uuid[]) AND h.id = v.host_id AND h.revoked_at IS NULL
      AND (h.last_heartbeat_at IS NULL OR h.last_heartbeat_at <= v.received_at)
    RETURNING h.id
)
SELECT 'written'::text AS level, '00000000-0000-0000-0000-000000000000'::uuid AS host_id,
       '00000000-0000-0000-0000-000000000000'::uuid AS environment_id, ''::text AS config_type,
       (SELECT count(*) FROM upd)::bigint AS version, false AS flag, 0::integer AS attempts,
       NULL::timestamptz AS next_at, NULL::timestamptz AS changed_at
UNION ALL
SELECT 'override', hc.host_id, '00000000-0000-0000-0000-000000000000'::uuid, hc.config_type, hc.version,
       hc.config_data IS NOT NULL, 0, NULL, hc.updated_at
FROM host_configs hc
WHERE hc.host_id = ANY (ARRAY(SELECT id FROM upd))
UNION ALL
SELECT 'environment', '00000000-0000-0000-0000-000000000000'::uuid, ec.environment_id, ec.config_type, ec.version,
       ec.config_data IS NOT NULL, 0, NULL, ec.updated_at
FROM environment_configs ec
WHERE ec.environment_id = ANY (@environment_ids::uuid[])
UNION ALL
SELECT 'repair', r.host_id, '00000000-0000-0000-0000-000000000000'::uuid, r.config_type, r.version,
       false, r.attempts, r.next_at, NULL
FROM config_repairs r
WHERE r.host_id = ANY (ARRAY(SELECT id FROM upd))
UNION ALL
SELECT 'staged', rl.host_id, '00000000-0000-0000-0000-000000000000'::uuid, rl.config_type, rl.version,
       true, 0, NULL, rl.joined_at
FROM rollout_layers rl
WHERE rl.host_id = ANY (ARRAY(SELECT id FROM upd));

-- name: InactiveHostIDs :many
-- The hosts among host_ids that are revoked or gone: their acks and heartbeats are dropped, never
-- stored.
SELECT v.id::uuid AS id
FROM unnest(@host_ids::uuid[]) AS v(id)
WHERE NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = v.id AND h.revoked_at IS NULL);

-- name: FailedApplies :many
-- The failed apply results of the given hosts (only hosts found behind: few): a version the agent
-- refused is not re-sent at once, it backs off like a repeated repair.
SELECT host_id, config_type, version
FROM host_config_apply_status
WHERE host_id = ANY (@host_ids::uuid[]) AND status = 'failed';

-- name: UpsertRepairs :exec
-- Records the repairs asked (or, for a version the agent acked failed, deferred) in one batch: a new
-- version starts over at the given attempt, the same version takes it. Rows are sorted by the caller.
INSERT INTO config_repairs AS r (host_id, config_type, version, attempts, first_at, last_at, next_at)
SELECT v.host_id, v.config_type, v.version, v.attempts, now(), now(), v.next_at
FROM (
    SELECT unnest(@host_ids::uuid[]) AS host_id,
           unnest(@config_types::text[]) AS config_type,
           unnest(@versions::bigint[]) AS version,
           unnest(@attempts::integer[]) AS attempts,
           unnest(@next_ats::timestamptz[]) AS next_at
) AS v
ON CONFLICT (host_id, config_type) DO UPDATE
SET first_at = CASE WHEN r.version = excluded.version THEN r.first_at ELSE excluded.first_at END,
    version  = excluded.version,
    attempts = excluded.attempts,
    last_at  = excluded.last_at,
    next_at  = excluded.next_at;

-- name: DeleteRepairs :exec
-- Closes the repairs of (host, type) pairs that now report the version they should hold.
DELETE FROM config_repairs r
USING (
    SELECT unnest(@host_ids::uuid[]) AS host_id, unnest(@config_types::text[]) AS config_type
) AS v
WHERE r.host_id = v.host_id AND r.config_type = v.config_type;

-- name: HostReports :many
-- The last stored report of the given hosts (few: those whose heartbeat came within the repair grace
-- of a write) with what anti-entropy needs to check it again once the grace is over: the layer
-- versions and open repairs as UpdateHeartbeats returns them, and per type the version the host last
-- acked "applied" ('applied' rows), and 'staged' rows as UpdateHeartbeats. On 'host' rows config_type holds the agent id. Revoked hosts are
-- left out.
WITH h AS MATERIALIZED (
    SELECT hs.id, hs.environment_id, hs.agent_id, hs.config_versions
    FROM hosts hs
    WHERE hs.id = ANY (@host_ids::uuid[]) AND hs.revoked_at IS NULL
)
SELECT 'host'::text AS level, h.id AS host_id, h.environment_id, h.agent_id::text AS config_type, 0::bigint AS version,
       false AS flag, 0::integer AS attempts, NULL::timestamptz AS next_at, NULL::timestamptz AS changed_at,
       h.config_versions AS reported
FROM h
UNION ALL
SELECT 'override', hc.host_id, '00000000-0000-0000-0000-000000000000'::uuid, hc.config_type, hc.version,
       hc.config_data IS NOT NULL, 0, NULL, hc.updated_at, NULL
FROM host_configs hc
WHERE hc.host_id IN (SELECT id FROM h)
UNION ALL
SELECT 'environment', '00000000-0000-0000-0000-000000000000'::uuid, ec.environment_id, ec.config_type, ec.version,
       ec.config_data IS NOT NULL, 0, NULL, ec.updated_at, NULL
FROM environment_configs ec
WHERE ec.environment_id IN (SELECT DISTINCT environment_id FROM h)
UNION ALL
SELECT 'repair', r.host_id, '00000000-0000-0000-0000-000000000000'::uuid, r.config_type, r.version,
       false, r.attempts, r.next_at, NULL, NULL
FROM config_repairs r
WHERE r.host_id IN (SELECT id FROM h)
UNION ALL
SELECT 'applied', s.host_id, '00000000-0000-0000-0000-000000000000'::uuid, s.config_type, s.version,
       true, 0, NULL, NULL, NULL
FROM host_config_apply_status s
WHERE s.host_id IN (SELECT id FROM h) AND s.status = 'applied'
UNION ALL
SELECT 'staged', rl.host_id, '00000000-0000-0000-0000-000000000000'::uuid, rl.config_type, rl.version,
       true, 0, NULL, rl.joined_at, NULL
FROM rollout_layers rl
WHERE rl.host_id = ANY (ARRAY(SELECT id FROM h));

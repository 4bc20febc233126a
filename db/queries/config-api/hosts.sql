-- Host registration and the host views operators read (heartbeat state and apply status).

-- name: CreateHost :one
INSERT INTO hosts (client_id, environment_id, hostname, agent_id, nats_public_key, nats_expires_at, inventory_labels)
VALUES (@client_id, @environment_id, @hostname, @agent_id, sqlc.narg(nats_public_key), sqlc.narg(nats_expires_at),
        @inventory_labels::jsonb)
RETURNING id, client_id, environment_id, hostname, agent_id, created_at, inventory_labels;

-- name: CreateHosts :many
-- Registers a batch of hosts of one environment in one statement (so all or none): the arrays hold one
-- element per host (unnested side by side), an empty nats_public_keys element meaning none was issued.
-- Rows come back in no promised order; agent_id (unique) matches them to the batch. Every issued JWT
-- of the batch expires at nats_expires_at. inventory_labels holds each host's labels as a JSON object text.
INSERT INTO hosts (client_id, environment_id, hostname, agent_id, nats_public_key, nats_expires_at, inventory_labels)
SELECT @client_id::uuid, @environment_id::uuid, b.hostname, b.agent_id, NULLIF(b.nats_public_key, ''),
       CASE WHEN b.nats_public_key = '' THEN NULL ELSE sqlc.narg(nats_expires_at)::timestamptz END,
       b.inventory_labels::jsonb
FROM (SELECT unnest(@hostnames::text[]) AS hostname, unnest(@agent_ids::text[]) AS agent_id,
             unnest(@nats_public_keys::text[]) AS nats_public_key,
             unnest(@inventory_labels::text[]) AS inventory_labels) AS b
RETURNING id, client_id, environment_id, hostname, agent_id, created_at, inventory_labels;

-- name: FindHostConflicts :many
-- The existing hosts a batch collides with: any host with one of its agent ids (unique across all
-- environments), or a host of the environment with one of its hostnames.
SELECT agent_id, hostname, environment_id
FROM hosts
WHERE agent_id = ANY(@agent_ids::text[])
   OR (environment_id = @environment_id AND hostname = ANY(@hostnames::text[]));

-- name: GetHost :one
SELECT h.* FROM host_details h
WHERE h.id = @id
  AND (sqlc.narg(client_filter)::uuid IS NULL OR h.client_id = sqlc.narg(client_filter)::uuid);

-- name: ListHosts :many
SELECT h.* FROM host_details h
WHERE h.environment_id = @environment_id
  AND (sqlc.narg(after)::uuid IS NULL OR h.id > sqlc.narg(after)::uuid)
ORDER BY h.id
LIMIT @max_rows;

-- name: PatchHostLabels :many
-- Merges a patch into the inventory labels of the named hosts within the caller's client and (when
-- given) environment: set_labels are added or replaced, remove_keys dropped. Returns each updated host's
-- labels, so the caller can refuse (and roll back) a result over the per-host limit.
UPDATE hosts SET inventory_labels = (inventory_labels || @set_labels::jsonb) - @remove_keys::text[]
WHERE id = ANY(@ids::uuid[])
  AND (sqlc.narg(client_filter)::uuid IS NULL OR client_id = sqlc.narg(client_filter)::uuid)
  AND (sqlc.narg(environment_id)::uuid IS NULL OR environment_id = sqlc.narg(environment_id)::uuid)
RETURNING id, inventory_labels;

-- name: CountActiveHosts :one
SELECT count(*) FROM hosts WHERE environment_id = @environment_id AND revoked_at IS NULL;

-- name: ListActiveHostsWithOverride :many
-- A page of an environment's active hosts with their override of one type (if any), for dry runs.
SELECT h.id, h.hostname, h.agent_id, c.config_data AS override_data
FROM hosts h
LEFT JOIN host_configs c ON c.host_id = h.id AND c.config_type = @config_type
WHERE h.environment_id = @environment_id AND h.revoked_at IS NULL
ORDER BY h.hostname
LIMIT @max_rows;

-- name: LockHostsForRevocation :many
-- The hosts a revocation names, within the caller's client and (when given) environment, locked so a
-- concurrent renewal or re-issue of their NATS credentials is ordered before or after it.
SELECT id, client_id, environment_id, revoked_at, nats_public_key
FROM hosts
WHERE id = ANY(@ids::uuid[])
  AND (sqlc.narg(client_filter)::uuid IS NULL OR client_id = sqlc.narg(client_filter)::uuid)
  AND (sqlc.narg(environment_id)::uuid IS NULL OR environment_id = sqlc.narg(environment_id)::uuid)
ORDER BY id
FOR UPDATE;

-- name: RevokeHosts :many
-- Revokes hosts (already locked and filtered by LockHostsForRevocation) and lists their NATS user keys
-- for the account's revocation list: refused up to the latest expiry of any JWT issued for the key
-- (so a renewal racing the revocation is covered too), pruned after it unless a JWT without expiry was
-- ever issued for the key.
WITH revoked AS (
    UPDATE hosts SET revoked_at = now()
    WHERE id = ANY(@ids::uuid[]) AND revoked_at IS NULL
    RETURNING id, client_id, nats_public_key, nats_expires_at, nats_unexpiring, revoked_at
), listed AS (
    INSERT INTO nats_revocations (public_key, client_id, host_id, revoked_at, revoke_before, prune_after)
    SELECT r.nats_public_key, r.client_id, r.id, r.revoked_at, GREATEST(r.revoked_at, r.nats_expires_at),
           CASE WHEN r.nats_unexpiring THEN NULL ELSE r.nats_expires_at END
    FROM revoked r
    WHERE r.nats_public_key IS NOT NULL
    ON CONFLICT (public_key) DO NOTHING
    RETURNING public_key
)
SELECT revoked.id, (SELECT count(*) FROM listed)::int AS listed FROM revoked;

-- name: LockRevocations :exec
-- Serializes writers of the revocation list (the per-client cap) or its pushes, across replicas.
SELECT pg_advisory_xact_lock(@lock_key::bigint);

-- name: CountPendingRevocations :one
-- Revocation entries still in the account's list (not yet prunable at cutoff): those the client made
-- since @since (one JWT lifetime ago), and all.
SELECT count(*) FILTER (WHERE client_id = @client_id AND revoked_at >= @since::timestamptz)::int AS client_pending,
       count(*)::int AS total_pending
FROM nats_revocations
WHERE prune_after IS NULL OR prune_after >= @cutoff;

-- name: ListNATSRevocations :many
-- The account's desired revocation list at cutoff (entries whose JWTs have all expired are left out).
SELECT public_key, revoke_before
FROM nats_revocations
WHERE prune_after IS NULL OR prune_after >= @cutoff;

-- name: DeletePrunedNATSRevocations :execrows
DELETE FROM nats_revocations WHERE prune_after < @cutoff;

-- name: RenewHostNATSExpiry :one
-- Records the expiry of a renewed JWT for the host's current key, only while the host is not revoked
-- and its latest JWT expires before renewable_after (an agent renews two thirds into the lifetime, so
-- one asking again and again gets nothing). The row lock orders it against a revocation, which then
-- lists the new expiry.
UPDATE hosts SET nats_expires_at = GREATEST(nats_expires_at, @expires_at::timestamptz)
WHERE agent_id = @agent_id AND nats_public_key = @nats_public_key AND revoked_at IS NULL
  AND (nats_expires_at IS NULL OR nats_expires_at < @renewable_after::timestamptz)
RETURNING id;

-- name: LockHostForReissue :one
SELECT id, client_id, nats_public_key, nats_expires_at, nats_unexpiring, revoked_at
FROM hosts
WHERE id = @id
  AND (sqlc.narg(client_filter)::uuid IS NULL OR client_id = sqlc.narg(client_filter)::uuid)
FOR UPDATE;

-- name: ReplaceHostNATSKey :exec
UPDATE hosts SET nats_public_key = @nats_public_key, nats_expires_at = @nats_expires_at, nats_unexpiring = false
WHERE id = @id;

-- name: InsertNATSRevocation :exec
-- Lists a replaced key (re-issued credentials) in the account's revocation list.
INSERT INTO nats_revocations (public_key, client_id, host_id, revoke_before, prune_after)
VALUES (@public_key, @client_id, @host_id, GREATEST(now(), sqlc.narg(expires_at)::timestamptz), sqlc.narg(prune_after)::timestamptz)
ON CONFLICT (public_key) DO NOTHING;

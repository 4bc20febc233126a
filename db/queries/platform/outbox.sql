-- name: InsertOutbox :one
INSERT INTO outbox (subject, payload, traceparent)
VALUES (@subject, @payload, sqlc.narg(traceparent))
RETURNING id;

-- ClaimOutbox locks the oldest unpublished rows for this relay's transaction. SKIP LOCKED lets several
-- relays share the table: a row another relay holds is skipped, never published twice.
-- name: ClaimOutbox :many
SELECT id, subject, payload, attempts, traceparent
FROM outbox
WHERE published_at IS NULL
ORDER BY id
LIMIT @batch_size
FOR UPDATE SKIP LOCKED;

-- name: MarkOutboxPublished :exec
UPDATE outbox
SET published_at = now()
WHERE id = ANY (@ids::bigint[]);

-- name: RecordOutboxFailure :exec
UPDATE outbox
SET attempts = attempts + 1,
    last_error = @last_error
WHERE id = @id;

-- name: CountUnpublishedOutbox :one
SELECT count(*) FROM outbox WHERE published_at IS NULL;

-- OutboxBacklog is the number of unpublished rows and the age in seconds of the oldest (0 when none),
-- for the relay's metrics: the partial index on unpublished ids keeps it cheap while the relay keeps up.
-- name: OutboxBacklog :one
SELECT count(*)::bigint AS pending,
       COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_seconds
FROM outbox
WHERE published_at IS NULL;

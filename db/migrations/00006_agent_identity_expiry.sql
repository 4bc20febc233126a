-- +goose Up
-- Agent NATS users expire: every JWT config-api signs for an agent carries exp, and the agent renews
-- it before then. nats_expires_at is the latest expiry of any JWT issued for the host's current key;
-- nats_unexpiring marks a key for which a JWT without expiry was issued (before expiry existed), whose
-- revocation therefore can never be pruned.
ALTER TABLE hosts
    ADD COLUMN nats_expires_at timestamptz,
    ADD COLUMN nats_unexpiring boolean NOT NULL DEFAULT false;
UPDATE hosts SET nats_unexpiring = true WHERE nats_public_key IS NOT NULL;

-- The desired revocation list of the NATS account: one entry per revoked agent user key. The server
-- refuses every JWT of public_key issued at or before revoke_before. An entry is pruned from the
-- account once prune_after (the latest expiry of any JWT issued for the key) has passed: no JWT it
-- could refuse is valid any more. NULL prune_after keeps it forever. No foreign keys: deleting a client
-- or host must never un-revoke its agents.
CREATE TABLE nats_revocations (
    public_key    text PRIMARY KEY,
    client_id     uuid NOT NULL,
    host_id       uuid,
    revoked_at    timestamptz NOT NULL DEFAULT now(),
    revoke_before timestamptz NOT NULL,
    prune_after   timestamptz
);
CREATE INDEX nats_revocations_client_idx ON nats_revocations (client_id, prune_after);
CREATE INDEX nats_revocations_prune_idx ON nats_revocations (prune_after);

INSERT INTO nats_revocations (public_key, client_id, host_id, revoked_at, revoke_before, prune_after)
SELECT nats_public_key, client_id, id, revoked_at, revoked_at, NULL
FROM hosts
WHERE revoked_at IS NOT NULL AND nats_public_key IS NOT NULL
ON CONFLICT (public_key) DO NOTHING;

-- +goose Down
DROP TABLE nats_revocations;
ALTER TABLE hosts DROP COLUMN nats_unexpiring, DROP COLUMN nats_expires_at;

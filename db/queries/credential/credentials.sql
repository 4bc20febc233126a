-- Queries of the credential service. It owns the credentials table and reads environments only to
-- check that a credential's environment belongs to the credential's client.

-- name: EnvironmentClientID :one
SELECT client_id
FROM environments
WHERE id = @id;

-- name: InsertCredential :one
INSERT INTO credentials (id, client_id, environment_id, name, fields, ciphertext, key_version, allowed_targets)
VALUES (@id, @client_id, sqlc.narg(environment_id), @name, @fields::text[], @ciphertext, @key_version, @allowed_targets::text[])
RETURNING id, client_id, environment_id, name, fields, ciphertext, key_version, created_at, updated_at, allowed_targets;

-- name: CredentialByID :one
SELECT id, client_id, environment_id, name, fields, ciphertext, key_version, created_at, updated_at, allowed_targets
FROM credentials
WHERE id = @id AND client_id = @client_id;

-- name: CredentialByIDForUpdate :one
-- Locks the row for a read-modify-write (rotate), so concurrent rotations serialise.
SELECT id, client_id, environment_id, name, fields, ciphertext, key_version, created_at, updated_at, allowed_targets
FROM credentials
WHERE id = @id AND client_id = @client_id
FOR UPDATE;

-- name: UpdateCredentialSecret :one
UPDATE credentials
SET fields = @fields::text[], ciphertext = @ciphertext, key_version = @key_version,
    allowed_targets = @allowed_targets::text[], updated_at = now()
WHERE id = @id AND client_id = @client_id
RETURNING id, client_id, environment_id, name, fields, ciphertext, key_version, created_at, updated_at, allowed_targets;

-- name: DeleteCredential :one
DELETE FROM credentials
WHERE id = @id AND client_id = @client_id
RETURNING id, client_id, environment_id, name, fields, ciphertext, key_version, created_at, updated_at, allowed_targets;

-- name: ListCredentials :many
-- A client's credentials in name order; with an environment id, only those scoped to that environment.
SELECT id, client_id, environment_id, name, fields, ciphertext, key_version, created_at, updated_at, allowed_targets
FROM credentials
WHERE client_id = @client_id
  AND (sqlc.narg(environment_id)::uuid IS NULL OR environment_id = sqlc.narg(environment_id)::uuid)
ORDER BY name, id;

-- name: CredentialsByIDs :many
-- Every credential among ids, whatever its client: the injector checks scoping itself so that it can
-- name the rule a reference broke.
SELECT id, client_id, environment_id, ciphertext, allowed_targets
FROM credentials
WHERE id = ANY (@ids::uuid[]);

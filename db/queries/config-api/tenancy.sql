-- Clients, environments and the owner probes used to audit cross-tenant attempts.
-- A NULL client_filter means an admin caller; otherwise every lookup is restricted to that client.

-- name: CreateClient :one
INSERT INTO clients (name) VALUES (@name)
RETURNING id, name, created_at;

-- name: GetClient :one
SELECT id, name, created_at
FROM clients
WHERE id = @id
  AND (sqlc.narg(client_filter)::uuid IS NULL OR id = sqlc.narg(client_filter)::uuid);

-- name: ListClients :many
SELECT id, name, created_at
FROM clients
WHERE sqlc.narg(client_filter)::uuid IS NULL OR id = sqlc.narg(client_filter)::uuid
ORDER BY name;

-- name: CreateEnvironment :one
INSERT INTO environments (client_id, name) VALUES (@client_id, @name)
RETURNING id, client_id, name, created_at;

-- name: GetEnvironment :one
SELECT id, client_id, name, created_at
FROM environments
WHERE id = @id
  AND (sqlc.narg(client_filter)::uuid IS NULL OR client_id = sqlc.narg(client_filter)::uuid);

-- name: ListEnvironments :many
SELECT id, client_id, name, created_at
FROM environments
WHERE client_id = @client_id
ORDER BY name;

-- name: ClientOfClient :one
SELECT id FROM clients WHERE id = @id;

-- name: ClientOfEnvironment :one
SELECT client_id FROM environments WHERE id = @id;

-- name: ClientOfHost :one
SELECT client_id FROM hosts WHERE id = @id;

-- Credentials belong to the credential service; config-api only reads the owner to audit a
-- cross-tenant attempt (never the secret or its ciphertext).
-- name: ClientOfCredential :one
SELECT client_id FROM credentials WHERE id = @id;

-- name: InsertAuditEvent :exec
INSERT INTO audit_events (actor, client_id, action, object, detail)
VALUES (@actor, sqlc.narg(client_id), @action, @object, sqlc.narg(detail));

-- API tokens. Only the SHA-256 of a token is stored.

-- name: CreateAPIToken :one
INSERT INTO api_tokens (name, token_hash, client_id)
VALUES (@name, @token_hash, sqlc.narg(client_id))
RETURNING id, name, client_id, created_at;

-- name: GetAPITokenByHash :one
SELECT id, name, client_id, last_used_at
FROM api_tokens
WHERE token_hash = @token_hash AND revoked_at IS NULL;

-- name: TouchAPIToken :exec
UPDATE api_tokens SET last_used_at = now() WHERE id = @id;

-- name: RevokeAPIToken :execrows
UPDATE api_tokens SET revoked_at = now() WHERE id = @id AND revoked_at IS NULL;

-- +goose Up
-- The targets a credential may be sent to, as host:port patterns ("db.internal:5432",
-- "*.prod.example.com:*"). Empty: any target (the behaviour before targets existed). The credential
-- service refuses to inject the credential into a collector whose host and port match none of them.
ALTER TABLE credentials ADD COLUMN allowed_targets text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE credentials DROP COLUMN IF EXISTS allowed_targets;

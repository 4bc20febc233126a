-- +goose Up
-- Stored statements pile up: every config version signed stays in config_statements. The resolver
-- prunes, in bounded batches, the statements that can no longer be served once they are older than a
-- retention (PruneConfigStatements); this index finds the old ones without reading the whole table.
CREATE INDEX config_statements_created_idx ON config_statements (created_at);

-- +goose Down
DROP INDEX config_statements_created_idx;

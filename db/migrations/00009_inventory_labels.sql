-- +goose Up
-- Inventory labels: operator-owned key/value metadata on a host, set through the API (at registration,
-- by PATCH or in bulk) and never by an agent; selectors over them pick hosts in listing, drift and
-- rollout stages. Distinct from the agent's `labels` config type. Keys and values are checked by
-- libs/protocol/selector before they are written.
ALTER TABLE hosts ADD COLUMN inventory_labels jsonb NOT NULL DEFAULT '{}'::jsonb
    CHECK (jsonb_typeof(inventory_labels) = 'object');

-- +goose Down
ALTER TABLE hosts DROP COLUMN inventory_labels;

-- +goose Up
-- The W3C traceparent of the write that produced an outbox row (NULL when tracing is off or the write
-- was not sampled), so the relay can continue the trace into the JetStream message it publishes.
ALTER TABLE outbox ADD COLUMN traceparent text CHECK (length(traceparent) <= 128);

-- +goose Down
ALTER TABLE outbox DROP COLUMN IF EXISTS traceparent;

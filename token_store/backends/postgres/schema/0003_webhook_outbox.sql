-- Connection health webhooks waiting for their receiver (PostgresStore.enqueue_webhook): no secret,
-- no TTL; a row leaves when its receiver accepted it or it was given up.
CREATE TABLE webhook_outbox (
    id text PRIMARY KEY,
    type text NOT NULL,
    body text NOT NULL,
    created_at double precision NOT NULL,
    next_attempt_at double precision NOT NULL,
    attempts integer NOT NULL DEFAULT 0
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at);

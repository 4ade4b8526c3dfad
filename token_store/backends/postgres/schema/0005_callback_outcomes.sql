-- How a provider callback ended (token_store.models.CallbackOutcome, JSON, no secret), under the
-- hash of its taken OAuth state, for a few minutes: the same callback repeated shows this outcome
-- instead of a second code exchange.
CREATE TABLE callback_outcomes (
    key text PRIMARY KEY,
    record text NOT NULL,
    expires_at double precision NOT NULL
);
CREATE INDEX callback_outcomes_expiry ON callback_outcomes (expires_at);

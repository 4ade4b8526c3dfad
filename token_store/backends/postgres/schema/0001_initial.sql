-- Version 1 of the PostgreSQL store (token_store/backends/postgres/store.py). Times are seconds since the epoch
-- (double precision, exact for Python floats: replace_connection compares updated_at for equality).
-- Blobs are sealed by the store (AES-GCM); one-time values and lock names are stored as SHA-256.

CREATE TABLE connections (
    iss text NOT NULL,
    sub text NOT NULL,
    provider text NOT NULL,
    account text NOT NULL,
    account_label text NOT NULL,
    blob bytea NOT NULL,
    connected_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    status text NOT NULL DEFAULT 'ok',
    refreshed_at double precision,
    PRIMARY KEY (iss, sub, provider, account)
);

CREATE TABLE elicitations (
    id text PRIMARY KEY,
    iss text NOT NULL,
    sub text NOT NULL,
    provider text NOT NULL,
    status text NOT NULL,
    expires_at double precision NOT NULL,
    record jsonb NOT NULL
);
CREATE INDEX elicitations_user ON elicitations (iss, sub, status, expires_at);
CREATE INDEX elicitations_expiry ON elicitations (expires_at);

CREATE TABLE oauth_states (
    key text PRIMARY KEY,
    blob bytea NOT NULL,
    expires_at double precision NOT NULL
);
CREATE INDEX oauth_states_expiry ON oauth_states (expires_at);

CREATE TABLE nonces (
    key text PRIMARY KEY,
    expires_at double precision NOT NULL
);
CREATE INDEX nonces_expiry ON nonces (expires_at);

CREATE TABLE locks (
    name_hash text PRIMARY KEY,
    owner text NOT NULL,
    expires_at double precision NOT NULL
);
CREATE INDEX locks_expiry ON locks (expires_at);

CREATE TABLE default_accounts (
    iss text NOT NULL,
    sub text NOT NULL,
    provider text NOT NULL,
    account text NOT NULL,
    PRIMARY KEY (iss, sub, provider)
);

-- Moving to another store (token_store/store_copy.py). Each connection deleted, and when (no
-- secret), kept until `expires_at` (DELETIONS_KEPT after the deletion), so that a copy between
-- stores never brings one back; and when the first `store copy-from` into this store began.
CREATE TABLE deleted_connections (
    iss text NOT NULL,
    sub text NOT NULL,
    provider text NOT NULL,
    account text NOT NULL,
    deleted_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    PRIMARY KEY (iss, sub, provider, account)
);
CREATE INDEX deleted_connections_expiry ON deleted_connections (expires_at);

CREATE TABLE copy_window (
    id integer PRIMARY KEY CHECK (id = 1),
    opened_at double precision NOT NULL
);

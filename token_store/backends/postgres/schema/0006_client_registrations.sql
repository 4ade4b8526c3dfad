-- This server's dynamic client registrations at authorization servers
-- (PostgresStore.add_client_registration): one per (issuer, redirect URI), keyed by their hash,
-- sealed (a client secret). No TTL.
CREATE TABLE client_registrations (
    key text PRIMARY KEY,
    blob bytea NOT NULL
);

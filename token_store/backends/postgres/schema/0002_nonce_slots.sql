-- One live nonce per slot (a user's open "which account?" question at a provider): a new nonce put
-- into a slot replaces the slot's previous one in the same statement (PostgresStore.put_nonce).
ALTER TABLE nonces ADD COLUMN slot text;
CREATE UNIQUE INDEX nonces_slot ON nonces (slot);

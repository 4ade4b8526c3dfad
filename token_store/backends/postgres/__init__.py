"""The PostgreSQL backend and its numbered schema versions."""

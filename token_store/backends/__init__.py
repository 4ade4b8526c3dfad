"""The store's backends: SQLite (the embedded default), Redis (also Sentinel and Cluster), PostgreSQL."""

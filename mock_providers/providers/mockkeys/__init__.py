"""MockKeys: an API-key service."""

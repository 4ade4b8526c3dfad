"""Third-party providers: the catalogue, OAuth (authorization URL, exchange, refresh, revocation), API
answers, metadata discovery, outbound HTTP."""

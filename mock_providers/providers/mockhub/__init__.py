"""MockHub: a GitHub-like OAuth 2 provider."""

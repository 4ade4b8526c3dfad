"""MockGoogle: a Google-like OpenID provider."""

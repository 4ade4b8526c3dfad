"""What the mock OAuth servers share: authlib's server classes on Starlette, PKCE, RFC 9207 iss, the consent
page, token and revocation handlers."""

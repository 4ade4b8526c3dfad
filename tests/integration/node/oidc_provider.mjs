// Test-only: an oidc-provider instance on 127.0.0.1 for tests/integration.
// Usage: node oidc_provider.mjs PORT CLIENT_ID CLIENT_SECRET REDIRECT_URI
// stdout carries one JSON object per line: {"event":"ready","issuer":...} once listening, then
// {"event":"authorize",...} and {"event":"token",...} (with the issued tokens, so the tests can
// check that none reaches the MCP client and that a revoked one stops working).
import { randomBytes } from 'node:crypto';

import Provider from 'oidc-provider';

const [port, clientId, clientSecret, redirectUri] = process.argv.slice(2);
if (!port || !clientId || !clientSecret || !redirectUri) {
  console.error('usage: oidc_provider.mjs PORT CLIENT_ID CLIENT_SECRET REDIRECT_URI');
  process.exit(2);
}

const HOST = '127.0.0.1';
const issuer = `http://${HOST}:${port}`;
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
const sameClient = async (ctx, client, token) => token.clientId === client.clientId;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_post',
    },
  ],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true, allowedPolicy: sameClient },
    introspection: { enabled: true, allowedPolicy: sameClient },
  },
  claims: { openid: ['sub'] },
  scopes: ['openid'],
  cookies: { keys: [randomBytes(32).toString('base64url')] },
});

// Record what the tests need to observe; runs around every request.
provider.use(async (ctx, next) => {
  await next();
  const route = ctx.oidc?.route;
  if (route === 'authorization') {
    const params = ctx.oidc.params ?? {};
    emit({
      event: 'authorize',
      status: ctx.status,
      code_challenge_method: params.code_challenge_method ?? null,
      has_code_challenge: Boolean(params.code_challenge),
    });
  } else if (route === 'token' && ctx.status === 200 && ctx.body && typeof ctx.body === 'object') {
    emit({
      event: 'token',
      scope: ctx.body.scope ?? null,
      access_token: ctx.body.access_token ?? null,
      refresh_token: ctx.body.refresh_token ?? null,
      id_token: ctx.body.id_token ?? null,
    });
  } else if (route === 'revocation') {
    emit({ event: 'revocation', status: ctx.status });
  }
});

const server = provider.listen(Number(port), HOST, () => emit({ event: 'ready', issuer }));
server.on('error', (err) => {
  console.error(err);
  process.exit(1);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}

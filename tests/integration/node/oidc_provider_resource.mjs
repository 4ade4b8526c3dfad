// Test-only: oidc-provider as the authorization server of an MCP server (a protected resource) on
// 127.0.0.1: RFC 7591 dynamic registration, RFC 8707 resource indicators issuing JWT access tokens
// whose audience is the resource, refresh tokens, PKCE required, RFC 9207 `iss`, its own login
// and consent pages (devInteractions).
// Usage: node oidc_provider_resource.mjs PORT RESOURCE
// stdout: one JSON object per line, {"event":"ready","issuer":...} once listening, then
// {"event":"register",...}, {"event":"token",...} (with the issued tokens, so the tests can check
// that none reaches the MCP client).
import Provider from 'oidc-provider';
import { randomBytes } from 'node:crypto';

const [port, resource] = process.argv.slice(2);
if (!port || !resource) {
  console.error('usage: oidc_provider_resource.mjs PORT RESOURCE');
  process.exit(2);
}

const HOST = '127.0.0.1';
const issuer = `http://${HOST}:${port}`;
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

const provider = new Provider(issuer, {
  pkce: { required: () => true },
  scopes: ['openid', 'offline_access', 'read'],
  claims: { openid: ['sub'] },
  clientDefaults: { grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'] },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator !== resource) throw new Error('unknown resource');
        return {
          scope: 'read',
          audience: resource,
          accessTokenTTL: 3600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
});

provider.use(async (ctx, next) => {
  await next();
  const route = ctx.oidc?.route;
  if (route === 'registration' && ctx.status === 201) {
    emit({ event: 'register', client_id: ctx.body.client_id, auth_method: ctx.body.token_endpoint_auth_method });
  } else if (route === 'token' && ctx.status === 200 && ctx.body && typeof ctx.body === 'object') {
    emit({
      event: 'token',
      grant_type: ctx.oidc.params?.grant_type ?? null,
      resource: ctx.oidc.params?.resource ?? null,
      access_token: ctx.body.access_token ?? null,
      refresh_token: ctx.body.refresh_token ?? null,
    });
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

// Test-only: an oauth2-mock-server instance on 127.0.0.1 for tests/integration.
// Usage: node oauth2_mock_server.mjs PORT
// stdout carries one JSON object per line: {"event":"ready","issuer":...} once listening, then
// {"event":"authorize",...} and {"event":"token",...} (with the issued tokens).
import { OAuth2Server } from 'oauth2-mock-server';

const [port] = process.argv.slice(2);
if (!port) {
  console.error('usage: oauth2_mock_server.mjs PORT');
  process.exit(2);
}

const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
const server = new OAuth2Server();
server.issuer.url = `http://127.0.0.1:${port}`; // not `localhost`: the tests use 127.0.0.1 throughout
await server.issuer.keys.generate('RS256');

server.service.on('beforeAuthorizeRedirect', (redirect, req) => {
  const query = new URL(req.url, 'http://unused').searchParams;
  emit({
    event: 'authorize',
    code_challenge_method: query.get('code_challenge_method'),
    has_code_challenge: query.has('code_challenge'),
    redirect_has_iss: redirect.url.searchParams.has('iss'),
  });
});
server.service.on('beforeResponse', (response, req) => {
  emit({
    event: 'token',
    grant_type: req.body?.grant_type ?? null,
    has_code_verifier: Boolean(req.body?.code_verifier),
    status: response.statusCode,
    scope: response.body?.scope ?? null,
    access_token: response.body?.access_token ?? null,
    refresh_token: response.body?.refresh_token ?? null,
    id_token: response.body?.id_token ?? null,
  });
});

await server.start(Number(port), '127.0.0.1');
emit({ event: 'ready', issuer: server.issuer.url });
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.stop().then(() => process.exit(0)));
}

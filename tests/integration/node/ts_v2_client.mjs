// Test-only: the TypeScript SDK v2 client (@modelcontextprotocol/client) on protocol 2026-07-28
// (tests/integration/test_ts_client.py).
// Usage: MCPUC_BEARER=<token> node ts_v2_client.mjs MCP_URL [TOOL]
// The bearer comes from the environment, not argv, so `ps` never shows it.
//
// Pins 2026-07-28, declares URL-mode elicitation and leaves the client's input_required handling
// at its defaults (autoFulfill, maxRounds 10, 250 ms before a requestState-only leg): one
// callTool, and the SDK answers the InputRequiredResult itself. The elicitation handler is what an
// application writes: it shows the link (here: prints it for the test, which plays the user) and
// accepts. stdout carries one JSON object per line:
//   {"event":"elicitation","mode":"url","url":...,"message":...}
//   {"event":"leg","ms":...,"requestState":bool,"inputResponses":bool}   (each tools/call sent)
//   {"event":"answered","ms":...,"status":...}                         (each answer's headers)
//   {"event":"result","result":<CallToolResult>,"ms":...}
//   {"event":"error","message":...,"code":...}                         (exit status 1)
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, tool = 'whoami'] = process.argv.slice(2);
const bearer = process.env.MCPUC_BEARER;
if (!url || !bearer) {
  console.error('usage: MCPUC_BEARER=<token> ts_v2_client.mjs MCP_URL [TOOL]');
  process.exit(2);
}
const started = Date.now();
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

// Observes each leg the SDK sends; changes nothing.
async function observingFetch(input, init) {
  let body = null;
  try {
    body = typeof init?.body === 'string' ? JSON.parse(init.body) : null;
  } catch {
    body = null;
  }
  if (body?.method === 'tools/call') {
    emit({
      event: 'leg',
      ms: Date.now() - started,
      requestState: typeof body.params?.requestState === 'string',
      inputResponses: body.params?.inputResponses !== undefined,
    });
  }
  const response = await fetch(input, init);
  if (body?.method === 'tools/call') emit({ event: 'answered', ms: Date.now() - started, status: response.status });
  return response;
}

const client = new Client(
  { name: 'mcpuc-ts-v2-client', version: '1.0.0' },
  { capabilities: { elicitation: { url: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
client.setRequestHandler('elicitation/create', async (request) => {
  const { mode, url: link, message } = request.params;
  emit({ event: 'elicitation', mode: mode ?? 'form', url: link ?? null, message });
  return { action: 'accept' };
});

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  fetch: observingFetch,
});

try {
  await client.connect(transport);
  const result = await client.callTool({ name: tool, arguments: {} });
  emit({ event: 'result', result, ms: Date.now() - started });
  await client.close();
  process.exit(0);
} catch (error) {
  emit({ event: 'error', message: String(error?.message ?? error), code: error?.code ?? null });
  await client.close().catch(() => {});
  process.exit(1);
}

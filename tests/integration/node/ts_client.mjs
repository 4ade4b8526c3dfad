// Test-only: the official TypeScript MCP SDK as the client of our server (tests/integration/test_ts_client.py).
// Usage: MCPUC_BEARER=<token> node ts_client.mjs MCP_URL [TOOL] [TIMEOUT_SECONDS]
// The bearer comes from the environment, not argv, so `ps` never shows it.
//
// Protocol 2025-11-25: declares URL-mode elicitation, calls TOOL (default whoami), expects
// -32042 URLElicitationRequiredError, waits for notifications/elicitation/complete for its
// elicitationId (while the test completes the browser leg), then retries the call once.
// stdout carries one JSON object per line:
//   {"event":"initialized","protocolVersion":...}
//   {"event":"elicitation","url":...,"elicitationId":...,"message":...}
//   {"event":"completed","elicitationId":...}      (the notification arrived)
//   {"event":"result","result":<CallToolResult>}   (the retried call)
//   {"event":"error","message":...}                (anything unexpected; exit status 1)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ElicitationCompleteNotificationSchema,
  ElicitRequestSchema,
  ErrorCode,
  McpError,
  UrlElicitationRequiredError,
} from '@modelcontextprotocol/sdk/types.js';

const [url, tool = 'whoami', timeoutArg = '30'] = process.argv.slice(2);
const bearer = process.env.MCPUC_BEARER;
if (!url || !bearer) {
  console.error('usage: MCPUC_BEARER=<token> ts_client.mjs MCP_URL [TOOL] [TIMEOUT_SECONDS]');
  process.exit(2);
}
const timeoutMs = Number(timeoutArg) * 1000;
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

// Completion notifications by elicitationId; one may arrive before anyone waits for it.
const completed = new Set();
const waiters = new Map();
function completion(elicitationId) {
  if (completed.has(elicitationId)) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no notifications/elicitation/complete for ${elicitationId} in ${timeoutArg} s`)),
      timeoutMs,
    );
    waiters.set(elicitationId, () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

const client = new Client(
  { name: 'mcpuc-ts-sdk-client', version: '1.0.0' },
  { capabilities: { elicitation: { url: {} } } },
);
client.setNotificationHandler(ElicitationCompleteNotificationSchema, (notification) => {
  const { elicitationId } = notification.params;
  completed.add(elicitationId);
  emit({ event: 'completed', elicitationId });
  waiters.get(elicitationId)?.();
});
// URL mode is declared, so the server may also send elicitation/create in URL mode; on
// 2025-11-25 ours answers -32042 instead, and a request here would be a test failure.
client.setRequestHandler(ElicitRequestSchema, (request) => {
  emit({ event: 'unexpected_elicit_request', mode: request.params.mode ?? 'form' });
  return { action: 'decline' };
});

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
});

try {
  await client.connect(transport);
  emit({ event: 'initialized', protocolVersion: transport.protocolVersion ?? null });
  let elicitation;
  try {
    const first = await client.callTool({ name: tool, arguments: {} });
    throw new Error(`expected -32042, got a result: ${JSON.stringify(first).slice(0, 200)}`);
  } catch (error) {
    if (!(error instanceof McpError) || error.code !== ErrorCode.UrlElicitationRequired) throw error;
    // The SDK turns -32042 into UrlElicitationRequiredError when the data carries elicitations.
    const elicitations =
      error instanceof UrlElicitationRequiredError ? error.elicitations : (error.data?.elicitations ?? []);
    if (elicitations.length !== 1) throw new Error(`expected one elicitation, got ${elicitations.length}`);
    elicitation = elicitations[0];
  }
  emit({
    event: 'elicitation',
    mode: elicitation.mode,
    url: elicitation.url,
    elicitationId: elicitation.elicitationId,
    message: elicitation.message,
  });
  await completion(elicitation.elicitationId);
  const result = await client.callTool({ name: tool, arguments: {} });
  emit({ event: 'result', result });
  await client.close();
  process.exit(0);
} catch (error) {
  emit({ event: 'error', message: String(error?.message ?? error), code: error?.code ?? null });
  await client.close().catch(() => {});
  process.exit(1);
}

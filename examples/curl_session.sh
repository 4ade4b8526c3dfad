#!/usr/bin/env bash
# The raw MCP exchange of a 2025-11-25 session, with curl only: `initialize` (the server answers
# with an Mcp-Session-Id header), `notifications/initialized`, then `tools/call whoami`, which
# answers -32042 with a connect URL until the user has connected MockHub.
#
#   .venv/bin/mcp-url-connect demo &            # or `make demo` in another terminal
#   bash examples/curl_session.sh
#
# MCP_URL and TOKEN override the defaults (the demo's /mcp and a dev token for MCP_USER, alice).
set -euo pipefail

MCP_URL=${MCP_URL:-http://127.0.0.1:8000/mcp}
TOKEN=${TOKEN:-$(.venv/bin/mcp-url-connect dev-token "${MCP_USER:-alice}")}
HEADERS=$(mktemp)
trap 'rm -f "$HEADERS"' EXIT

# POST one JSON-RPC message; print it and the answer (a JSON body or an SSE stream of them).
post() {
  printf '\n> %s\n' "$1"
  curl -sS --fail-with-body "$MCP_URL" -D "$HEADERS" \
    -H "Authorization: Bearer $TOKEN" \
    -H 'Accept: application/json, text/event-stream' \
    -H 'Content-Type: application/json' \
    "${@:2}" -d "$1"
  printf '\n< HTTP %s\n' "$(head -n1 "$HEADERS" | cut -d' ' -f2)"
}

post '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"url":{}}},"clientInfo":{"name":"curl","version":"0"}}}'
SESSION=$(grep -i '^mcp-session-id:' "$HEADERS" | cut -d' ' -f2 | tr -d '\r')
echo "< Mcp-Session-Id: $SESSION"

SESSION_HEADERS=(-H "Mcp-Session-Id: $SESSION" -H 'MCP-Protocol-Version: 2025-11-25')
post '{"jsonrpc":"2.0","method":"notifications/initialized"}' "${SESSION_HEADERS[@]}"
post '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}' "${SESSION_HEADERS[@]}"

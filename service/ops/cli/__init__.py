"""Console entry point: `mcp-url-connect demo | serve | mock-providers | dev-token | keys rotate|retire |
connections list|revoke | store migrate|copy-from`.

One module per command group (servers.py, keys.py, connections.py, store.py), each adding its
parsers; what they share (settings, store and runtime, output, failures) is preamble.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from service.ops.cli import connections, keys, servers, store
from service.ops.cli.preamble import PROG, CommandFailed, complain

DESCRIPTION = "MCP server with URL-mode connect flows: run it, try it, operate its store and connections."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (servers, keys, connections, store):
        group.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except CommandFailed as failed:
        complain(str(failed))
        return failed.exit_code
    return code

"""`python -m service.ops.cli`: the `mcp-url-connect` command (tests, bench and the kit's cluster run
it this way, from a checkout)."""

import sys

from service.ops.cli import main

sys.exit(main())

"""`python -m service.ops.cli`: the `mcp-url-connect` command (tests, bench and the kit's cluster run
it this way, from a checkout)."""

import sys

from service.ops.cli import main

if __name__ == "__main__":  # importing the package's modules one by one runs nothing
    sys.exit(main())

"""A/B runs of an in-process benchmark: the same module run as a child in this checkout and in
another tree (`--baseline DIR`, e.g. `git archive <rev> | tar -x -C DIR`), taking turns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def figures_in(tree: Path, module: str, *options: str) -> dict[str, float]:
    """`python -m <module> --child <options>` run in `tree`: the JSON object on its last line.

    Our own interpreter on the tree's own module, so each side measures its own code."""
    out = subprocess.run(  # noqa: S603
        [sys.executable, "-m", module, "--child", *options],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    return figures

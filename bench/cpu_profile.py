"""Run a module under cProfile timed by CPU time, not wall time (on a shared machine, wall time
charges a function for the moments the process waited for a core).

    python -m bench.cpu_profile OUT.prof -m MODULE [ARGS...]

The stats are written when the module returns (a server: after SIGTERM's graceful stop).
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, flag, module, *args = sys.argv[1:]
    if flag != "-m":
        raise SystemExit(__doc__)
    sys.argv = [module, *args]
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()

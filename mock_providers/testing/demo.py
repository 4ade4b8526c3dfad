"""The one place the kit and the tests import the demo wiring from (`build_demo` and its kin)."""

from __future__ import annotations

from service.demo import (
    LOGIN_CLIENT_ID,
    MOCKHUB_CLIENT_ID,
    Demo,
    build_demo,
    build_dev_setup,
    write_serve_env,
)

__all__ = ["LOGIN_CLIENT_ID", "MOCKHUB_CLIENT_ID", "Demo", "build_demo", "build_dev_setup", "write_serve_env"]

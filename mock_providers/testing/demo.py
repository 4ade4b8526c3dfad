"""The one place the kit imports the demo wiring from (`build_demo` and its constants)."""

from __future__ import annotations

from service.demo import MOCKHUB_CLIENT_ID, Demo, build_demo, build_dev_setup

__all__ = ["MOCKHUB_CLIENT_ID", "Demo", "build_demo", "build_dev_setup"]

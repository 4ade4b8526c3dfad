"""Load the testing kit's pytest plugin (the `mcpuc` fixture) unless the installed package already
registers it through its `pytest11` entry point (an editable install made before it existed)."""

from importlib.metadata import entry_points

PLUGIN = "mock_providers.testing.plugin"

pytest_plugins = [] if any(ep.value == PLUGIN for ep in entry_points(group="pytest11")) else [PLUGIN]

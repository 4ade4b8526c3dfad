"""mock_providers/demo.py: the demo's providers (`mockhub` and the `github`, `google`, `slack`
presets served by the mocks), its secrets, and the complete configuration `mock-providers`
writes for `serve` replicas."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from mock_providers import create_mock_providers_app
from mock_providers.app import stand_in_for
from mock_providers.demo import banner, build_demo, build_dev_setup, write_serve_env
from service.settings import load_settings


def test_the_demo_serves_the_presets_through_the_mocks(tmp_path: Path) -> None:
    demo = build_demo("127.0.0.1", 9100, 9101, tmp_path, presets=True)
    providers = demo.settings.providers
    assert list(providers) == ["mockhub", "github", "google", "slack"]
    assert providers["github"].api_base_url == "http://127.0.0.1:9101/mockhub"
    assert providers["github"].preset == "github" and providers["google"].preset == "google"
    app = create_mock_providers_app(demo.providers)
    assert stand_in_for(app, providers["github"].api_base_url) is app.state.mockhub.api
    assert stand_in_for(app, providers["google"].api_base_url) is app.state.mockgoogle.api
    assert stand_in_for(app, providers["slack"].api_base_url) is app.state.mockslack.api
    assert stand_in_for(app, "http://127.0.0.1:9101/elsewhere") is None
    # Each mock knows the client and the callback its provider uses.
    assert demo.providers.mockgoogle_client is not None and demo.providers.mockslack_client is not None
    assert demo.providers.mockgoogle_client.client_secret == providers["google"].client_secret
    assert demo.settings.callback_url("github") in demo.providers.mockhub_client.redirect_uris
    assert all(f"Provider {name!r}" in banner(demo) for name in providers)
    again = build_demo("127.0.0.1", 9100, 9101, tmp_path, presets=True)
    assert again.settings.providers["slack"].client_secret == providers["slack"].client_secret


def test_a_data_dir_of_an_older_demo_gains_the_missing_secrets(tmp_path: Path) -> None:
    build_demo("127.0.0.1", 9100, 9101, tmp_path)
    path = tmp_path / "demo-secrets.json"
    older = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith(("google", "slack"))}
    path.write_text(json.dumps(older))
    demo = build_demo("127.0.0.1", 9100, 9101, tmp_path, presets=True)
    now = json.loads(path.read_text())
    assert {k: now[k] for k in older} == older  # nothing regenerated
    assert now["google_client_secret"] == demo.settings.providers["google"].client_secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_serve_configuration_has_every_provider_complete(tmp_path: Path) -> None:
    for presets in (False, True):
        setup = build_dev_setup(
            "http://127.0.0.1:8080", "http://127.0.0.1:8001", tmp_path / str(presets), presets=presets
        )
        environ = dict(line.split("=", 1) for line in write_serve_env(setup).read_text().splitlines())
        loaded = load_settings(environ).require_safe_to_serve().providers
        assert loaded == setup.settings.providers  # every field, api_base_url and secrets included
    assert loaded["github"].api_base_url == "http://127.0.0.1:8001/mockhub"

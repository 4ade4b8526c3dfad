"""service/ops/cli/servers.py: dev-token and serve refuse clearly; demo data is generated once and kept;
the demo a newcomer runs starts, refuses and stops in one line each."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import jwt
import pytest

from mock_providers import create_mock_providers_app
from mock_providers.demo import banner, build_demo
from mock_providers.testing.servers import free_port
from service.ops.cli import main
from tests.support.cli import serve_environment
from tests.support.settle import eventually, succeeds


def test_dev_token_refuses_without_dev_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev-token", "alice", "--data-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "dev-as.json" in captured.err


def test_dev_token_prints_only_a_token_for_the_demo_audience(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    create_mock_providers_app(demo.providers)  # creates the dev AS key under the data dir
    assert main(["dev-token", "alice", "--data-dir", str(tmp_path)]) == 0
    token = capsys.readouterr().out.strip()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "alice"
    assert claims["iss"] == demo.settings.auth_issuer
    assert claims["aud"] == demo.settings.resource_url


def test_demo_secrets_are_generated_once_and_private(tmp_path: Path) -> None:
    first = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    second = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    assert first.settings.encryption_keys == second.settings.encryption_keys
    mode = stat.S_IMODE((tmp_path / "demo-secrets.json").stat().st_mode)
    assert mode == 0o600


def test_serve_refuses_an_incomplete_configuration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("MCPUC_AUTH_ISSUER", "MCPUC_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["serve"]) == 2
    assert "MCPUC_AUTH_ISSUER is required" in capsys.readouterr().err


def test_demo_refuses_a_non_loopback_host_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--host", "192.0.2.10", "--data-dir", str(tmp_path)]) == 2
    assert "loopback" in capsys.readouterr().err


def test_mock_providers_writes_a_private_serve_configuration(tmp_path: Path) -> None:
    from mock_providers.demo import build_dev_setup, write_serve_env
    from service.settings import load_settings

    setup = build_dev_setup("http://127.0.0.1:8080", "http://127.0.0.1:8001", tmp_path)
    env_file = write_serve_env(setup)
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    environ = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    loaded = load_settings(environ).require_safe_to_serve()
    assert loaded.providers["mockhub"].client_secret == setup.settings.providers["mockhub"].client_secret
    assert loaded.providers["mockhub"].issuer == "http://127.0.0.1:8001/mockhub"
    assert loaded.public_url == "http://127.0.0.1:8080"


# -- the demo a newcomer runs: busy ports, bad configuration, Ctrl-C ---------------------------

REPO_ROOT = Path(__file__).resolve().parents[5]


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "service.ops.cli", *argv]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


@pytest.mark.parametrize("which", ["--port", "--providers-port"])
def test_demo_on_a_busy_port_exits_at_once_with_one_line(tmp_path: Path, held_port: int, which: str) -> None:
    port, providers_port = (held_port, free_port()) if which == "--port" else (free_port(), held_port)
    argv = ["demo", "--port", str(port), "--providers-port", str(providers_port), "--data-dir", str(tmp_path)]
    argv += ["--metrics-port", str(free_port())]
    result = subprocess.run(_cli(*argv), capture_output=True, text=True, timeout=20, env=_env())
    assert result.returncode == 1
    assert result.stdout == ""  # no banner for a demo that cannot start
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert f"port {held_port}" in lines[0] and which in lines[0] and "Traceback" not in lines[0]


def test_demo_refuses_one_port_for_both_servers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["demo", "--port", "9100", "--providers-port", "9100", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    assert (
        capsys.readouterr().err
        == "mcp-url-connect: configuration error: --port and --providers-port are both 9100\n"
    )


def test_demo_stops_its_servers_on_sigterm(tmp_path: Path) -> None:
    port, providers_port, metrics_port = free_port(), free_port(), free_port()
    argv = ["demo", "--port", str(port), "--providers-port", str(providers_port), "--data-dir", str(tmp_path)]
    argv += ["--metrics-port", str(metrics_port)]
    demo = subprocess.Popen(
        _cli(*argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env()
    )
    try:
        _wait_for_listener(port)
        _wait_for_listener(providers_port)
        _wait_for_listener(metrics_port)
        # Metrics on their own port, as `serve` does by default; not on the public one.
        assert httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 404
        demo.send_signal(signal.SIGTERM)
        output, _ = demo.communicate(timeout=10)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0
    assert ".venv/bin/mcp-url-connect dev-token alice" in output
    # The default runtime (service/http/server.py), really in use, signals included.
    assert "event loop: uvloop" in output
    assert f"http://127.0.0.1:{metrics_port}/metrics" in output  # the banner names it
    # Three uvicorn servers in one process: each of their lines says which one it is.
    assert output.count("[mcp] Started server process") == 1
    assert output.count("[providers] Started server process") == 1
    assert output.count("[metrics] Started server process") == 1
    assert "[mcp] Finished server process" in output and "[providers] Finished server process" in output


def test_banner_commands_run_from_the_repository_root(tmp_path: Path) -> None:
    text = banner(build_demo("127.0.0.1", 9100, 9101, tmp_path))
    steps = text.split("Next:", 1)[1].splitlines()
    commands = [line.strip() for line in steps if line.strip().startswith((".venv/", "mcp-", "python"))]
    assert len(commands) == 3
    for command in commands:
        program, *rest = command.split()
        assert program in (".venv/bin/mcp-url-connect", ".venv/bin/python")
        if program.endswith("python"):
            assert (REPO_ROOT / rest[0]).is_file()


def test_serve_with_a_placeholder_encryption_key_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serve_environment(monkeypatch, encryption_keys="REPLACE_ME")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-url-connect: configuration error: ") and err.count("\n") == 1


def test_mock_providers_for_a_non_loopback_mcp_url_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["mock-providers", "--mcp-public-url", "http://non-loopback.example", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-url-connect: configuration error: ") and err.count("\n") == 1
    assert "MCPUC_PUBLIC_URL" in err


def _wait_for_listener(port: int) -> None:
    def connect() -> None:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()

    eventually(lambda: succeeds(connect, OSError), f"a listener on {port}", within=20.0, poll=0.1)


def test_production_packages_do_not_import_the_mock_providers() -> None:
    imports = "import sys, service.ops.cli, service.app, connect_routes, token_store"
    code = f"{imports}; print('mock_providers' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60, check=True
    )
    assert result.stdout.strip() == "False"

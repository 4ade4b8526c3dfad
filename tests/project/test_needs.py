"""tests/needs.py: a missing service skips fast and is reported at the test; in CI it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import redis.connection

from tests import needs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(needs, "REDIS_PORT", needs.free_port())  # nothing listens there


@pytest.mark.usefixtures("no_redis")
def test_a_missing_redis_is_probed_once_then_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py's default retries with backoff made each skipped Redis test cost 4-5 s: the probe
    tries one connection, no more (what it costs is printed by `make test`'s durations, not here)."""
    attempts = []
    real = redis.connection.Connection._connect

    def counted(self: redis.connection.Connection) -> object:
        attempts.append(self.port)
        return real(self)

    monkeypatch.setattr(redis.connection.Connection, "_connect", counted)
    with pytest.raises(pytest.skip.Exception) as info:
        needs.require_redis()
    assert attempts == [needs.REDIS_PORT]
    assert "to run this test: apt install redis-server" in str(info.value)


@pytest.mark.usefixtures("no_redis")
def test_redis_prefix_skips_without_redis_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.skip.Exception), needs.redis_prefix():
        pass
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"^CI requires Redis"), needs.redis_prefix():
        pass


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_missing_binary_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("PATH", "/nonexistent")
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="no-such-binary-here"):
        needs.need_binary("no-such-binary-here")


def test_skips_are_reported_at_the_test_not_at_needs_py(tmp_path: Path) -> None:
    """`pytest -rs` names the file and line of the test that needed the service."""
    test_file = tmp_path / "test_wants_redis.py"
    test_file.write_text(
        "from tests import needs\n"
        "\n"
        "def test_wants_redis(monkeypatch):\n"
        "    monkeypatch.setattr(needs, 'REDIS_PORT', needs.free_port())\n"
        "    with needs.redis_prefix():\n"  # line 5
        "        pass\n"
        "\n"
        "def test_wants_a_binary():\n"
        "    needs.need_binary('no-such-binary-here')\n"  # line 9
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(test_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    skipped = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 2, run.stdout
    assert "test_wants_redis.py:5: Redis at 127.0.0.1:" in skipped[0], skipped
    assert "test_wants_redis.py:9: the no-such-binary-here binary" in skipped[1], skipped
    assert "needs.py" not in run.stdout

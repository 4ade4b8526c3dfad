"""The per-key request rate (GCRA): bursts, the steady rate, the wait it names, and memory that
holds only recently active keys."""

from __future__ import annotations

import pytest

from service.http.request_rate import RequestRate


def test_a_burst_then_the_steady_rate_per_key() -> None:
    now = [0.0]
    rate = RequestRate(per_second=2, burst=3, clock=lambda: now[0])
    assert [rate.admit("alice") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert rate.admit("alice") == pytest.approx(0.5)  # one interval until the next fits
    assert rate.admit("bob") == 0.0  # another key is not affected
    now[0] = 0.5
    assert rate.admit("alice") == 0.0
    assert rate.admit("alice") == pytest.approx(0.5)
    now[0] = 10.0  # idle long enough: the whole burst again
    assert [rate.admit("alice") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert rate.admit("alice") > 0


def test_a_refusal_costs_nothing_and_retry_after_is_whole_seconds() -> None:
    now = [0.0]
    rate = RequestRate(per_second=1, burst=1, clock=lambda: now[0])
    assert rate.admit("k") == 0.0
    assert [rate.admit("k") for _ in range(5)] == [pytest.approx(1.0)] * 5  # refused ones not counted
    assert rate.retry_after(0.01) == 1 and rate.retry_after(1.2) == 2


def test_only_recently_active_keys_are_kept() -> None:
    now = [0.0]
    rate = RequestRate(per_second=10, burst=5, clock=lambda: now[0])
    for user in range(1000):
        rate.admit(user)
    now[0] = 1.0
    rate.admit("later")
    assert rate.tracked() == 1


@pytest.mark.parametrize(("per_second", "burst"), [(0, 1), (-1, 1), (float("nan"), 1), (1, 0)])
def test_a_rate_must_be_positive(per_second: float, burst: int) -> None:
    with pytest.raises(ValueError, match="per_second > 0"):
        RequestRate(per_second, burst, clock=lambda: 0.0)

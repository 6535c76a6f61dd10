"""The client's defences against hostile relays, as units (the attacks are in tests/attacks/)."""

from __future__ import annotations

import pytest

from didactyl_tui.errors import RelayError
from didactyl_tui.nostr.messages import Prefix
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.nostr.relay_guard import FailedEvents, FrameHealth, TokenBucket
from didactyl_tui.nostr.results import Disposition, RelayVerdict, Verdict


def test_failed_events_are_bounded_and_forget_the_least_recently_added() -> None:
    failed = FailedEvents(capacity=2)
    failed.add(("a", "s"))
    failed.add(("b", "s"))
    failed.add(("a", "s"))  # added again: now the most recent
    failed.add(("c", "s"))
    assert len(failed) == 2 and ("b", "s") not in failed and ("a", "s") in failed and ("c", "s") in failed


def test_failed_events_are_keyed_by_id_and_signature() -> None:
    failed = FailedEvents()
    failed.add(("id", "bad-sig"))
    assert ("id", "bad-sig") in failed
    assert ("id", "good-sig") not in failed  # a forgery cannot blacklist the genuine event


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_goes_into_debt_and_says_how_long_to_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=5.0, clock=clock)
    for _ in range(5):
        bucket.take()
    assert bucket.wait_time() == 0.0
    bucket.take(3)
    assert bucket.wait_time() == pytest.approx(0.3)
    clock.now += 0.3
    assert bucket.wait_time() == pytest.approx(0.0)
    clock.now += 100
    bucket.take(5)
    assert bucket.wait_time() == 0.0  # refilled to the burst, never beyond
    bucket.take(1)
    assert bucket.wait_time() == pytest.approx(0.1)


def test_frame_health_judges_a_full_window() -> None:
    health = FrameHealth(window=10, max_invalid_share=0.5)
    for _ in range(9):
        health.note("bad_json")
    assert health.failing() is None  # not enough frames to judge
    health.note("invalid_sig")
    assert health.failing() == "bad_json"
    for _ in range(5):
        health.note(None)
    assert health.failing() is None  # 5 of the last 10 invalid: not more than half
    assert sum(health.invalid.values()) == 5
    health.reset()
    assert health.failing() is None and not health.invalid


@pytest.mark.parametrize(("verdict", "message", "disposition"), [
    (Verdict.ACCEPTED, "", Disposition.HELD),
    (Verdict.ACCEPTED, "duplicate: have it", Disposition.HELD),
    (Verdict.REJECTED, "duplicate: have it", Disposition.HELD),
    (Verdict.REJECTED, "replaced: have a newer version", Disposition.REPLACED),
    (Verdict.REJECTED, "invalid: bad signature", Disposition.REFUSED),
    (Verdict.REJECTED, "blocked: no", Disposition.REFUSED),
    (Verdict.REJECTED, "pow: 20 bits", Disposition.REFUSED),
    (Verdict.REJECTED, "restricted: members", Disposition.REFUSED),
    (Verdict.REJECTED, "mute: muted", Disposition.REFUSED),
    (Verdict.REJECTED, "rate-limited: slow down", Disposition.RETRY),
    (Verdict.REJECTED, "error: unknown", Disposition.RETRY),
    (Verdict.REJECTED, "auth-required: sign in", Disposition.RETRY),
    (Verdict.REJECTED, "no prefix", Disposition.RETRY),
    (Verdict.TIMEOUT, "invalid: our words are never a relay's prefix", Disposition.RETRY),
    (Verdict.NOT_CONNECTED, "connection refused", Disposition.RETRY),
])
def test_verdict_disposition_is_read_from_the_typed_prefix(
    verdict: Verdict, message: str, disposition: Disposition
) -> None:
    v = RelayVerdict("ws://r", verdict, message)
    assert v.disposition is disposition
    assert (v.url, v.verdict, v.message) == ("ws://r", verdict, message)  # the fields callers read
    if verdict in (Verdict.TIMEOUT, Verdict.NOT_CONNECTED):
        assert v.prefix is None


def test_a_given_prefix_wins_over_the_message() -> None:
    assert RelayVerdict("ws://r", Verdict.REJECTED, "odd text", Prefix.BLOCKED).disposition is Disposition.REFUSED


@pytest.mark.parametrize("kwargs", [
    {"verify_rate": 0},
    {"frame_rate": float("inf")},
    {"frame_rate": float("nan")},
    {"verify_burst": 0.5},
    {"health_window": 0},
    {"max_invalid_share": 1.0},
    {"penalty_base": 0},
    {"penalty_base": 10.0, "penalty_max": 5.0},
])
def test_impossible_defence_settings_are_a_relay_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(RelayError):
        RelayClient("ws://127.0.0.1:9", **kwargs)  # type: ignore[arg-type]

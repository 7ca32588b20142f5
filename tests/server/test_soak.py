"""The bounded soak (vt/server/soak.py) for a few seconds: random valid and invalid requests, clients that
walk away, a planted engine-thread error and a planted stall; at the end no block in use, no stream open,
/health 200, memory within 10% of the warm-up's."""

from __future__ import annotations

from vt.server.soak import soak


def test_a_short_soak_leaves_the_server_healthy_and_holding_nothing() -> None:
    r = soak(seconds=12.0, clients=8, seed=1)
    assert r.count("200") > 0 and r.count("400") > 0, f"non-vacuity: requests were served and refused {r.statuses}"
    assert r.count("stalled") > 0 and r.count("planted") > 0 and r.count("left") > 0, (
        f"non-vacuity: both faults hit and clients left mid-stream {r.statuses}")
    assert not r.unexpected, r.unexpected
    assert r.blocks_in_use == 0 and r.streams_open == 0, (r.blocks_in_use, r.streams_open)
    assert r.healthy, "/health answers 200 after the soak"
    assert r.rss_end_mb <= 1.10 * r.rss_start_mb, f"memory grew {r.rss_start_mb:.0f} -> {r.rss_end_mb:.0f} MB"
    assert r.ok

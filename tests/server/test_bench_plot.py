"""vt bench serve's plot: a title and the throughput, TTFT and TPOT panels. Apart from test_bench.py, whose tests
run servers: the plot's mutant needs this test alone."""

from __future__ import annotations

from vt.server import bench


def test_the_plot_has_a_title_and_a_tpot_panel() -> None:
    r = bench.summarize([bench.One(ok=True, ttft=0.01, latency=0.1, itl=[0.01], output_tokens=10)], 4, float("inf"),
                        1.0, 16)
    fig = bench.figure([r], "vt bench serve: tiny-qwen3")
    assert fig._suptitle is not None and fig._suptitle.get_text() == "vt bench serve: tiny-qwen3"
    assert [ax.get_title() for ax in fig.axes] == ["throughput", "TTFT", "TPOT"]

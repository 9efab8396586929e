"""The picture of a stepped-load run: latency percentiles against offered load."""

import pathlib

import matplotlib

matplotlib.use("Agg")  # no screen: draw to a file
import matplotlib.pyplot as plt


def latency_against_load(steps: list[dict], path: pathlib.Path) -> None:
    """Plot p50/p95/p99 (log scale) against the offered rate of each step, with the rate the
    server actually served on a second axis: where that stops following, it is saturated."""
    offered = [step["offered_rate"] for step in steps]
    figure, latency_axis = plt.subplots(figsize=(8, 4.5), dpi=110)
    for percentile, style in (("p50", "o-"), ("p95", "s-"), ("p99", "^-")):
        values = [step["latency_ms"][percentile] for step in steps]
        latency_axis.plot(offered, values, style, label=f"{percentile} latency")
    latency_axis.set_yscale("log")
    latency_axis.set_xlabel("offered load (requests/s, constant rate)")
    latency_axis.set_ylabel("latency (ms, log scale)")
    latency_axis.grid(True, which="both", alpha=0.3)
    served_axis = latency_axis.twinx()
    served = [step["throughput"] for step in steps]
    served_axis.plot(offered, served, "k--", alpha=0.6, label="served req/s")
    served_axis.plot(offered, offered, ":", color="grey", alpha=0.6, label="served = offered")
    served_axis.set_ylabel("served (requests/s)")
    lines = latency_axis.get_legend_handles_labels()
    more = served_axis.get_legend_handles_labels()
    latency_axis.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    latency_axis.set_title("shopapi, the load mix at a stepped constant rate")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)

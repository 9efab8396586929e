"""The picture of a stepped-load run: latency and goodput against offered load."""

import pathlib

import matplotlib

matplotlib.use("Agg")  # no screen: draw to a file
import matplotlib.pyplot as plt


def latency_against_load(steps: list[dict], path: pathlib.Path) -> None:
    """Plot the 2xx answers' p50 and p99 and every answer's p99 (log scale, each timed from when
    it was due) against the offered rate of each step, with the 2xx served a second on a second
    axis: without degradation, latency stays flat past saturation while the 2xx hold."""
    offered = [step["offered_rate"] for step in steps]
    figure, latency_axis = plt.subplots(figsize=(8, 4.5), dpi=110)
    for key, percentile, style, label in (
        ("latency_ok_ms", "p50", "o-", "p50 of the 2xx"),
        ("latency_ok_ms", "p99", "^-", "p99 of the 2xx"),
        ("latency_ms", "p99", "x:", "p99 of every answer (503s included)"),
    ):
        values = [step[key].get(percentile, float("nan")) for step in steps]
        latency_axis.plot(offered, values, style, label=label)
    latency_axis.set_yscale("log")
    latency_axis.set_xlabel("offered load (requests/s, constant rate)")
    latency_axis.set_ylabel("latency (ms, log scale)")
    latency_axis.grid(True, which="both", alpha=0.3)
    served_axis = latency_axis.twinx()
    served_axis.plot(offered, [step["goodput"] for step in steps], "k--", alpha=0.6,
                     label="2xx served a second")  # fmt: skip
    served_axis.plot(offered, offered, ":", color="grey", alpha=0.6, label="served = offered")
    served_axis.set_ylabel("2xx served (requests/s)")
    served_axis.set_ylim(bottom=0)
    lines = latency_axis.get_legend_handles_labels()
    more = served_axis.get_legend_handles_labels()
    latency_axis.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    latency_axis.set_title("shopapi, mix_v3 at a stepped constant rate")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)

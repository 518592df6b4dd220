"""Plots of an estimate: per-kernel time breakdown and a roofline chart."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .atomic import atomic_path
from .profiles import Profile


def plot_report(report: pd.DataFrame, profile: Profile, path: str | Path) -> Path:
    """Write a PNG with (left) each kernel's time in execution order, coloured by kind, and
    (right) each kernel's achieved ops/s against its operational intensity, under the
    profile's rooflines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(dict.fromkeys(report["kind"]))
    colours = {k: plt.cm.tab20(i % 20) for i, k in enumerate(kinds)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5))

    left.bar(np.arange(len(report)), report["time_ms"], color=[colours[k] for k in report["kind"]], width=1.0)
    left.set_xlabel("kernel (execution order)")
    left.set_ylabel("estimated time [ms]")
    by_kind = report.groupby("kind", sort=False)["time_ms"].sum().sort_values(ascending=False)
    left.legend([plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in by_kind.index[:12]],
                [f"{k}: {v:.3g} ms" for k, v in by_kind.items()][:12], fontsize=8, loc="upper right")
    left.set_title(f"{report.attrs.get('model', '')} on {profile.name}: "
                   f"{report.attrs.get('total_ms', report['time_ms'].sum()):.3f} ms")

    timed = report[(report["time_ms"] > 0) & (report["bytes"] > 0) & (report["ops"] > 0)]
    intensity = timed["ops"] / timed["bytes"]
    achieved = timed["ops"] / (timed["time_ms"] * 1e-3)
    right.scatter(intensity, achieved, s=14, c=[colours[k] for k in timed["kind"]])
    if len(timed):
        x = np.logspace(np.log10(max(intensity.min() / 4, 1e-3)), np.log10(intensity.max() * 4), 100)
        lines: dict[tuple[float, float], list[str]] = {}
        used = dict.fromkeys([("roofline", "default")] + list(zip(timed["layer_model"], timed["profile_entry"])))
        for type_name, entry in used:
            model = profile.layer_models[type_name][entry]
            if hasattr(model, "peak_ops_s"):
                lines.setdefault((model.peak_ops_s, model.bandwidth_bytes_s), []).append(entry)
        for (peak, bandwidth), entries in lines.items():
            right.plot(x, np.minimum(peak, x * bandwidth), lw=1, label="roofline: " + ", ".join(entries))
        right.legend(fontsize=8)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("operational intensity [ops/byte]")
    right.set_ylabel("achieved [ops/s]")
    right.set_title("kernels under the profile's rooflines")
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path

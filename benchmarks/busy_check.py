"""Does the busy-machine check foresee a noisy session? The canary's readings before and
during each accuracy-benchmark session against that session's ground-truth round-to-round
difference, from the committed results folders (a benchmark: prints a table, measures
nothing).

    python benchmarks/busy_check.py [--results benchmarks/results]

Each ``sessions.jsonl`` line holds the check's line before measuring ("canary spread X %
over 1 s": (p90 - p10) / median of the canary's runs in that second), the line over the
session (with the canary drift correction: the same spread of the canary's times between
the items, written "canary drift X %" since 2026-12-06 and "canary spread X %" before) and
the session's mean |diff| of consecutive rounds per set. One row per (session, set); the
last lines give how often each reading was above its warning level and its Spearman
correlation with the round-to-round difference, over all rows and per set. The check
warns on the drift (:data:`~annette_torch.measure.machine_load.DRIFT_WARNING`), not on the
spread before: docs/accuracy.md, session 29.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from annette_torch.measure.machine_load import DRIFT_WARNING

RESULTS_ROOT = Path(__file__).parent / "results"
SPREAD = re.compile(r"canary spread ([\d.]+)%")
DRIFT = re.compile(r"canary (?:drift|spread) ([\d.]+)%")
#: the level the check warned at on the spread before a session until 2026-12-06
OLD_SPREAD_WARNING = 0.05


def session_rows(root: Path) -> pd.DataFrame:
    """(folder, finished, set, canary spread % before, canary drift % during or NaN,
    round to round %) per session and set."""
    rows = []
    for path in sorted(root.rglob("sessions.jsonl")):
        for line in path.read_text().splitlines():
            session = json.loads(line)
            found = SPREAD.search(session.get("before", ""))
            if not found:
                continue
            drift = DRIFT.search(session.get("during", ""))
            for name, r2r in (session.get("round_to_round") or {}).items():
                if pd.notna(r2r):
                    rows.append({"folder": str(path.parent.relative_to(root)), "finished": session["finished_utc"][:16],
                                 "set": name, "canary_spread_pct": float(found.group(1)),
                                 "canary_drift_pct": float(drift.group(1)) if drift else np.nan, "r2r_pct": 100 * r2r})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS_ROOT), help="root of the results folders")
    rows = session_rows(Path(parser.parse_args().results))
    if rows.empty:
        raise SystemExit("no sessions with a canary spread and round-to-round differences found")
    with pd.option_context("display.width", 200, "display.max_colwidth", 60, "display.max_rows", None):
        print(rows.sort_values("canary_spread_pct").to_string(index=False, float_format="%.1f"))
    readings = (("canary spread before", "canary_spread_pct", OLD_SPREAD_WARNING),
                ("canary drift during", "canary_drift_pct", DRIFT_WARNING))
    print()
    for label, column, level in readings:
        known = rows.dropna(subset=[column])
        above = (known[column] > 100 * level).mean() if len(known) else float("nan")
        print(f"{label}: above {level:.0%} in {above:.0%} of {len(known)} (session, set) rows")
    for label, column, _ in readings:
        for name, part in [("all", rows)] + list(rows.groupby("set")):
            part = part.dropna(subset=[column])
            if len(part) >= 3:
                rho, p = spearmanr(part[column], part.r2r_pct)
                print(f"{name:6s} {len(part):3d} rows: Spearman({label}, round to round) {rho:+.2f} (p {p:.2g})")


if __name__ == "__main__":
    main()

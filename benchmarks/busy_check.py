"""Does the busy-machine check foresee a noisy session? The canary's spread that the check
measures before each accuracy-benchmark session, against that session's ground-truth
round-to-round difference, from the committed results folders (a benchmark: prints a
table, measures nothing).

    python benchmarks/busy_check.py [--results benchmarks/results]

Each ``sessions.jsonl`` line holds the check's line before measuring ("canary spread X %
over 1 s": (p90 - p10) / median of the canary's runs) and the session's mean |diff| of
consecutive rounds per set. One row per (session, set); the last lines give how often the
check warned and the Spearman correlation between the spread and the round-to-round
difference, over all rows and per set.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd
from scipy.stats import spearmanr

from annette_torch.measure.machine_load import NOISE_WARNING

RESULTS_ROOT = Path(__file__).parent / "results"
SPREAD = re.compile(r"canary spread ([\d.]+)%")


def session_rows(root: Path) -> pd.DataFrame:
    """(folder, finished, set, canary spread %, round to round %) per session and set."""
    rows = []
    for path in sorted(root.rglob("sessions.jsonl")):
        for line in path.read_text().splitlines():
            session = json.loads(line)
            found = SPREAD.search(session.get("before", ""))
            if not found:
                continue
            for name, r2r in (session.get("round_to_round") or {}).items():
                if pd.notna(r2r):
                    rows.append({"folder": str(path.parent.relative_to(root)), "finished": session["finished_utc"][:16],
                                 "set": name, "canary_spread_pct": float(found.group(1)), "r2r_pct": 100 * r2r})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS_ROOT), help="root of the results folders")
    rows = session_rows(Path(parser.parse_args().results))
    if rows.empty:
        raise SystemExit("no sessions with a canary spread and round-to-round differences found")
    with pd.option_context("display.width", 200, "display.max_colwidth", 60, "display.max_rows", None):
        print(rows.sort_values("canary_spread_pct").to_string(index=False, float_format="%.1f"))
    warned = (rows.canary_spread_pct > 100 * NOISE_WARNING).mean()
    print(f"\nthe check warned (spread above {NOISE_WARNING:.0%}) before {warned:.0%} of {len(rows)} (session, set) rows")
    for name, part in [("all", rows)] + list(rows.groupby("set")):
        if len(part) >= 3:
            rho, p = spearmanr(part.canary_spread_pct, part.r2r_pct)
            print(f"{name:6s} {len(part):3d} rows: Spearman(canary spread, round to round) {rho:+.2f} (p {p:.2f})")


if __name__ == "__main__":
    main()

"""``protocol.json``: the protocol a folder of measurements was taken with, and the canary's reference.

A results folder (a calibration store, the accuracy benchmark's results, a table of
kernels measured in context) holds numbers of one meaning only: their statistic, their
drift correction and, with the canary, the canary time they are expressed against. The
record says which::

    {"statistic": "p10", "across_rounds": "pool", "drift": "canary", "canary": "canary-v1",
     "canary_ms": 0.412, "since": "2026-12-01T09:00:00+00:00"}

``across_rounds`` (absent in records written before it existed: "pool") says whether the
statistic is of the pooled runs or the median of the rounds' statistics.
``canary_ms`` is null until the first session has timed the canary. ``since``: when the
record was started; a folder measured before (rows older than that) holds numbers of
another protocol. Written atomically.
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..atomic import atomic_path
from .canary import CANARY_NAME
from ..validation import DataError, number, read_json
from .protocol import ACROSS_ROUNDS, DRIFTS, STATISTICS, Protocol, describe_statistic

RECORD_FILE = "protocol.json"
#: what the folders measured before this protocol existed hold: the median of one round, uncorrected
LEGACY = {"statistic": "median", "across_rounds": "pool", "drift": "none", "canary": None, "canary_ms": None,
          "since": None}


def read_record(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The record of ``folder`` (None when it has none), read through the validation
    layer (:func:`~annette_torch.validation.read_json`: a regular file within the size and
    nesting limits); :class:`~annette_torch.validation.DataError` naming the file and
    field when it is malformed."""
    path = Path(folder) / RECORD_FILE
    if not path.exists():
        return None
    record = read_json(path, "protocol record")
    where = f"protocol record {path}"
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if record.get("statistic") not in STATISTICS:
        raise DataError(f"{where}: field 'statistic' must be one of {', '.join(STATISTICS)}, "
                        f"got {record.get('statistic')!r}")
    if record.setdefault("across_rounds", "pool") not in ACROSS_ROUNDS:
        raise DataError(f"{where}: field 'across_rounds' must be one of {', '.join(ACROSS_ROUNDS)}, "
                        f"got {record.get('across_rounds')!r}")
    if record.get("drift") not in DRIFTS:
        raise DataError(f"{where}: field 'drift' must be one of {', '.join(DRIFTS)}, got {record.get('drift')!r}")
    if record.get("canary_ms") is not None:
        number(record["canary_ms"], f"{where}: field 'canary_ms' (a positive number or null)", low=0, low_open=True)
    return record


def new_record(protocol: Protocol) -> dict[str, Any]:
    """A record for measuring with ``protocol`` from now on (no canary reference yet)."""
    return {"statistic": protocol.statistic, "across_rounds": protocol.across_rounds, "drift": protocol.drift,
            "canary": CANARY_NAME if protocol.drift == "canary" else None, "canary_ms": None,
            "since": datetime.now(timezone.utc).isoformat(timespec="microseconds")}


def differences(record: dict[str, Any], protocol: Protocol, statistic: bool = True) -> list[str]:
    """How measuring with ``protocol`` would differ from what ``record`` holds (its
    statistic only when ``statistic``; how rounds are combined, the drift correction and
    canary always)."""
    found = []
    if statistic and record["statistic"] != protocol.statistic:
        found.append(f"statistic {record['statistic']!r}, not {protocol.statistic!r}")
    if record.get("across_rounds", "pool") != protocol.across_rounds:
        found.append(f"rounds combined by {record.get('across_rounds', 'pool')!r}, not {protocol.across_rounds!r}")
    if record["drift"] != protocol.drift:
        found.append(f"drift correction {record['drift']!r}, not {protocol.drift!r}")
    elif protocol.drift == "canary" and record.get("canary") != CANARY_NAME:
        found.append(f"canary {record.get('canary')!r}, not {CANARY_NAME!r}")
    return found


def write_record(folder: str | os.PathLike, record: dict[str, Any]) -> None:
    """Write ``record`` as the folder's ``protocol.json`` (atomically)."""
    with atomic_path(Path(folder) / RECORD_FILE) as tmp:
        tmp.write_text(json.dumps(record, indent=1) + "\n")


def describe(record: dict[str, Any]) -> str:
    """One line: the statistic, drift correction and canary reference of a record."""
    if record["drift"] == "canary":
        reference = f"{record['canary_ms']:.4g} ms" if record.get("canary_ms") else "not timed yet"
        drift = f"drift-corrected against {record.get('canary')} ({reference})"
    else:
        drift = "not drift-corrected"
    return f"{describe_statistic(record['statistic'], record.get('across_rounds', 'pool'))}, {drift}"

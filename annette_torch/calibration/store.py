"""The measurement store: append-only CSV tables, one folder per backend fingerprint.

    store = MeasurementStore.open("calibration/data", backend.fingerprint())
    store.done()                      # benchmark ids already measured (ok or failed)
    store.append(network_row, layer_rows)
    store.networks(), store.layers()  # pandas DataFrames

Folder ``<root>/<backend>-<threads>t-<precision>-<runtime>-<cpu hash>/`` holds
``fingerprint.json``, ``networks.csv`` (one row per benchmark: spec, status, error,
end-to-end latency) and ``layers.csv`` (one row per layer or runtime kernel, see
:mod:`.matcher`). A benchmark is committed by its ``networks.csv`` row, which is
written after its layer rows; each row group is one ``write`` to a file opened for
appending, then ``fsync``. Opening the store repairs what a kill can leave: a last line
without its newline is cut, and layer rows of an uncommitted benchmark are dropped, so
a rerun measures that benchmark again and nothing is counted twice. A lock file keeps
two campaigns from writing the same folder.

:meth:`MeasurementStore.compact` moves the rows into ``networks.csv.gz`` and
``layers.csv.gz`` (about six times smaller, for committing) and empties the live files;
readers combine archive and live rows, ignoring live rows of benchmarks the archive
already holds, so a kill during compaction loses or doubles nothing either.
"""
from __future__ import annotations

import csv
import fcntl
import gzip
import hashlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ..atomic import atomic_path
from ..kinds import FEATURES

NETWORK_COLUMNS = ("benchmark", "family", "spec", "status", "error", "time_ms", "spread", "repeats",
                   "layers_sum_ms", "kernels", "wall_s", "finished_utc")
LAYER_COLUMNS = ("benchmark", "layer", "kind", "op", "status", "kernel", "kernel_type", "exec_type",
                 "fused_into", "successors", "fusion", "time_ms", "spread") + FEATURES
_FLOAT_DIGITS = 6


class StoreError(RuntimeError):
    """The store folder cannot be used: another campaign holds it, or its fingerprint differs."""


def fingerprint_folder(fingerprint: dict[str, Any]) -> str:
    """Folder name for a fingerprint: readable parts plus a hash of the CPU model name and,
    where recorded, its identity (another CPU of the same name gets another folder)."""
    cpu = str(fingerprint.get("cpu", ""))
    if "cpu_id" in fingerprint:
        cpu += json.dumps(fingerprint["cpu_id"], sort_keys=True)
    cpu = hashlib.sha1(cpu.encode()).hexdigest()[:8]
    text = (f"{fingerprint['backend']}-{fingerprint['threads']}t-{fingerprint['precision']}-"
            f"{fingerprint['runtime_version']}-{cpu}")
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text)


def _format(value: Any) -> str:
    if isinstance(value, float):
        if value != value:                                   # NaN: an empty cell
            return ""
        if value.is_integer() and abs(value) < 1e15:        # counts and dimensions stay exact
            return str(int(value))
        return f"{value:.{_FLOAT_DIGITS}g}"
    return "" if value is None else str(value)


def _csv_bytes(rows: Iterable[dict[str, Any]], columns: tuple[str, ...]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        unknown = set(row) - set(columns)
        if unknown:
            raise ValueError(f"store rows have unknown columns: {', '.join(sorted(unknown))}")
        writer.writerow([_format(row.get(c)) for c in columns])
    return buffer.getvalue().encode()


def _append(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view):]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class MeasurementStore:
    """One fingerprint's measurements; open it with :meth:`open` (see module doc)."""

    def __init__(self, folder: Path, fingerprint: dict[str, Any], lock_handle: Any) -> None:
        self.folder = folder
        self.fingerprint = fingerprint
        self._lock_handle = lock_handle
        self.networks_path = folder / "networks.csv"
        self.layers_path = folder / "layers.csv"

    @classmethod
    def open(cls, root: str | os.PathLike, fingerprint: dict[str, Any]) -> MeasurementStore:
        """Open (create) the folder for ``fingerprint`` under ``root``, lock it and repair
        what an interrupted campaign left; ``StoreError`` if another process holds it."""
        folder = Path(root) / fingerprint_folder(fingerprint)
        folder.mkdir(parents=True, exist_ok=True)
        lock_handle = open(folder / ".lock", "w")
        try:
            fcntl.flock(lock_handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_handle.close()
            raise StoreError(f"{folder} is in use by another calibration campaign") from None
        fingerprint_path = folder / "fingerprint.json"
        if fingerprint_path.exists():
            recorded = json.loads(fingerprint_path.read_text())
            if recorded != fingerprint:
                lock_handle.close()
                raise StoreError(f"{fingerprint_path} records {recorded}, not {fingerprint}")
        else:
            with atomic_path(fingerprint_path) as tmp:
                tmp.write_text(json.dumps(fingerprint, indent=1) + "\n")
        store = cls(folder, fingerprint, lock_handle)
        store._repair()
        return store

    def close(self) -> None:
        """Release the lock."""
        self._lock_handle.close()

    def __enter__(self) -> MeasurementStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repair(self) -> None:
        for path, columns in ((self.networks_path, NETWORK_COLUMNS), (self.layers_path, LAYER_COLUMNS)):
            header = ",".join(columns) + "\n"
            if not path.exists() or path.stat().st_size == 0:
                path.write_text(header)
                continue
            data = path.read_bytes()
            if not data.startswith(header.encode()):
                raise StoreError(f"{path} does not start with the expected header {header.strip()!r}")
            if not data.endswith(b"\n"):          # a row cut by a kill: drop it
                with open(path, "rb+") as handle:
                    handle.truncate(data.rfind(b"\n") + 1)
        committed = self.done()
        live = _read(self.layers_path)
        orphan = ~live["benchmark"].isin(committed)
        if orphan.any():
            _rewrite(self.layers_path, live[~orphan], LAYER_COLUMNS)

    def done(self, include_failed: bool = True) -> set[str]:
        """Ids of the committed benchmarks: measured, and unless ``include_failed`` is
        false, also those whose last attempt failed."""
        networks = self.networks()
        if not include_failed:
            networks = networks[networks["status"] == "ok"]
        return set(networks["benchmark"])

    def append(self, network: dict[str, Any], layers: list[dict[str, Any]]) -> None:
        """Add one benchmark: its layer rows, then its network row (the commit)."""
        benchmark = network["benchmark"]
        if layers:
            _append(self.layers_path, _csv_bytes(({**row, "benchmark": benchmark} for row in layers), LAYER_COLUMNS))
        _append(self.networks_path, _csv_bytes([network], NETWORK_COLUMNS))

    def networks(self) -> pd.DataFrame:
        """The committed benchmarks, one row each (the last attempt of a retried one)."""
        return _combined(self.networks_path)

    def layers(self) -> pd.DataFrame:
        """The layer rows of the committed benchmarks."""
        return _combined(self.layers_path)

    def compact(self) -> None:
        """Move all rows into the gzip archives and empty the live files (see module doc)."""
        networks, layers = self.networks(), self.layers()
        for path, table, columns in ((self.layers_path, layers, LAYER_COLUMNS),
                                     (self.networks_path, networks, NETWORK_COLUMNS)):
            with atomic_path(_archive(path)) as tmp:
                tmp.write_bytes(gzip.compress(_table_bytes(table, columns), mtime=0))
        for path, columns in ((self.layers_path, LAYER_COLUMNS), (self.networks_path, NETWORK_COLUMNS)):
            _rewrite(path, pd.DataFrame(columns=list(columns)), columns)


def _archive(path: Path) -> Path:
    return path.with_name(path.name + ".gz")


def _table_bytes(table: pd.DataFrame, columns: tuple[str, ...]) -> bytes:
    return (",".join(columns) + "\n").encode() + _csv_bytes(table.to_dict("records"), columns)


def _rewrite(path: Path, table: pd.DataFrame, columns: tuple[str, ...]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(_table_bytes(table, columns))


_TEXT_COLUMNS = ("benchmark", "family", "spec", "status", "error", "finished_utc", "layer", "kind", "op",
                 "kernel", "kernel_type", "exec_type", "fused_into", "successors", "fusion")


def _read(path: Path) -> pd.DataFrame:
    """One CSV table (plain or gzip): text columns as text ("" when empty), the others
    as numbers (NaN when empty)."""
    numeric = [c for c in NETWORK_COLUMNS + LAYER_COLUMNS if c not in _TEXT_COLUMNS]
    return pd.read_csv(path, keep_default_na=False, na_values={c: [""] for c in numeric},
                       dtype={c: str for c in _TEXT_COLUMNS})


def _combined(live_path: Path) -> pd.DataFrame:
    """Archive rows, then the live rows of benchmarks the archive does not hold; for the
    networks table, one row per benchmark, its last (a retry after a failure)."""
    live = _read(live_path)
    archive_path = _archive(live_path)
    if archive_path.exists():
        archive = _read(archive_path)
        if live_path.name != "networks.csv":
            live = live[~live["benchmark"].isin(set(archive["benchmark"]))]
        live = pd.concat([archive, live], ignore_index=True) if len(live) else archive   # keep the archive's dtypes
    if live_path.name == "networks.csv":
        live = live.drop_duplicates("benchmark", keep="last").reset_index(drop=True)
    return live


def load_measurements(folder: str | os.PathLike) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """(fingerprint, networks, layers) of one store folder, read-only and without
    locking; layer rows of uncommitted benchmarks are left out."""
    folder = Path(folder)
    fingerprint_path = folder / "fingerprint.json"
    if not fingerprint_path.is_file():
        raise StoreError(f"{folder} is not a measurement store (no fingerprint.json)")
    networks = _combined(folder / "networks.csv")
    layers = _combined(folder / "layers.csv")
    return (json.loads(fingerprint_path.read_text()), networks,
            layers[layers["benchmark"].isin(set(networks["benchmark"]))].reset_index(drop=True))


def store_folders(root: str | os.PathLike) -> list[Path]:
    """The store folders at or directly under ``root`` (folders with a fingerprint.json)."""
    root = Path(root)
    if (root / "fingerprint.json").is_file():
        return [root]
    return sorted(p.parent for p in root.glob("*/fingerprint.json"))


def summarize(folder: str | os.PathLike) -> dict[str, Any]:
    """What one store holds: counts, measuring time and run-to-run spreads.

    ``network_spread``: median over benchmarks of the end-to-end spread, (p90 - p10) /
    median of the timed runs. ``layer_spread``: the same over executed layers of at
    least 0.05 ms (shorter ones are dominated by the profilers' microsecond resolution).
    ``measuring_min``: summed wall time of the benchmarks (building, export, compile, runs).
    """
    fingerprint, networks, layers = load_measurements(folder)
    ok = networks[networks["status"] == "ok"]
    executed = layers[(layers["status"] == "executed") & (layers["layer"] != "")]
    return {
        "store": Path(folder).name, "backend": fingerprint["backend"], "threads": fingerprint["threads"],
        "precision": fingerprint["precision"], "benchmarks": len(ok), "failed": len(networks) - len(ok),
        "layer_rows": len(layers), "executed_layers": len(executed),
        "fused_layers": int((layers["status"] == "fused").sum()),
        "measuring_min": float(networks["wall_s"].fillna(0).sum() / 60),
        "network_spread": float(ok["spread"].median()) if len(ok) else float("nan"),
        "layer_spread": float(executed.loc[executed["time_ms"] >= 0.05, "spread"].median()) if len(executed) else float("nan"),
    }


def summarize_families(folder: str | os.PathLike) -> pd.DataFrame:
    """Per benchmark family of one store: benchmarks measured and failed, median
    end-to-end time and spread, and the median ratio of the summed layer rows to the
    end-to-end time (how much of a network the per-layer profile covers)."""
    _, networks, _ = load_measurements(folder)
    ok = networks[networks["status"] == "ok"].assign(layers_share=lambda t: t["layers_sum_ms"] / t["time_ms"])
    table = ok.groupby("family").agg(benchmarks=("benchmark", "size"), time_ms=("time_ms", "median"),
                                     spread=("spread", "median"), layers_share=("layers_share", "median"))
    failed = networks[networks["status"] != "ok"].groupby("family").size()
    return table.assign(failed=failed.reindex(table.index, fill_value=0)).reset_index()

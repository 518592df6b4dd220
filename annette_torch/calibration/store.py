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

``references.csv`` (optional) holds whole reference networks of
:func:`annette_torch.transfer.references.reference_pool` measured end to end with the
store's protocol (a budgeted campaign measures them first): ``annette-torch fit``
anchors the profile it fits on them (:meth:`MeasurementStore.append_references`,
:func:`read_references`).
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
import warnings
import zlib
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..atomic import atomic_path
from ..graph.errors import first_line
from ..kinds import FEATURES
from ..validation import DataError, integer, read_bytes, read_json, safe_name, text

NETWORK_COLUMNS = ("benchmark", "family", "spec", "status", "error", "time_ms", "spread", "repeats",
                   "layers_sum_ms", "kernels", "wall_s", "finished_utc")
LAYER_COLUMNS = ("benchmark", "layer", "kind", "op", "status", "kernel", "kernel_type", "exec_type",
                 "fused_into", "successors", "fusion", "time_ms", "spread") + FEATURES
#: one row per reference network: its name in the reference pool, its set, the measured time
REFERENCE_COLUMNS = ("benchmark", "set", "time_ms", "finished_utc")
_FLOAT_DIGITS = 6


class StoreError(RuntimeError):
    """The store folder cannot be used: another campaign holds it, its fingerprint differs
    or is invalid, or one of its files is damaged beyond repair (the message names it)."""


class StoreRepairWarning(UserWarning):
    """A store file had damaged lines (a row cut short, a cell that is not a number); they
    were left out, and the message names the file and the lines."""


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
            try:
                recorded = read_json(fingerprint_path, "store fingerprint")    # equal to ours: valid
            except DataError as error:
                lock_handle.close()
                raise StoreError(str(error)) from None
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
        """Make the live files what :func:`read_tables` reads: without the lines it leaves
        out, the rows of benchmarks with damaged layer lines (measured again) and the layer
        rows of uncommitted benchmarks."""
        for path, columns in ((self.networks_path, NETWORK_COLUMNS), (self.layers_path, LAYER_COLUMNS)):
            if not path.exists() or path.stat().st_size == 0:
                path.write_text(",".join(columns) + "\n")
        networks, networks_dropped, _ = read_table(self.networks_path, NETWORK_COLUMNS)
        layers, layers_dropped, damaged = read_table(self.layers_path, LAYER_COLUMNS)
        keep = ~networks["benchmark"].isin(damaged)
        if networks_dropped or not keep.all():
            _rewrite(self.networks_path, networks[keep], NETWORK_COLUMNS)
        committed = self.done()
        keep = layers["benchmark"].isin(committed) & ~layers["benchmark"].isin(damaged)
        if layers_dropped or not keep.all():
            _rewrite(self.layers_path, layers[keep], LAYER_COLUMNS)

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

    def append_references(self, rows: Iterable[dict[str, Any]]) -> None:
        """Add measured reference networks (:data:`REFERENCE_COLUMNS`), one write."""
        path = self.folder / "references.csv"
        if not path.exists() or path.stat().st_size == 0:
            path.write_text(",".join(REFERENCE_COLUMNS) + "\n")
        _append(path, _csv_bytes(rows, REFERENCE_COLUMNS))

    def networks(self) -> pd.DataFrame:
        """The committed benchmarks, one row each (the last attempt of a retried one)."""
        return read_tables(self.folder)[0]

    def layers(self) -> pd.DataFrame:
        """The layer rows of the committed benchmarks."""
        return read_tables(self.folder)[1]

    def compact(self) -> None:
        """Move all rows into the gzip archives and empty the live files (see module doc)."""
        self._rewrite_all(self.networks(), self.layers())

    def drop_family(self, family: str) -> int:
        """Remove every benchmark of ``family`` (its network and layer rows), so that a
        campaign measures them again, e.g. after their generator changed; the store is
        left compacted. Returns how many benchmarks were dropped."""
        networks, layers = self.networks(), self.layers()
        drop = set(networks.loc[networks["family"] == family, "benchmark"])
        self._rewrite_all(networks[~networks["benchmark"].isin(drop)], layers[~layers["benchmark"].isin(drop)])
        return len(drop)

    def _rewrite_all(self, networks: pd.DataFrame, layers: pd.DataFrame) -> None:
        for path, table, columns in ((self.layers_path, layers, LAYER_COLUMNS),
                                     (self.networks_path, networks, NETWORK_COLUMNS)):
            with atomic_path(_archive(path)) as tmp:
                tmp.write_bytes(gzip.compress(_table_bytes(table, columns), mtime=0))
        for path, columns in ((self.layers_path, LAYER_COLUMNS), (self.networks_path, NETWORK_COLUMNS)):
            _rewrite(path, pd.DataFrame(columns=list(columns)), columns)


_TEXT_COLUMNS = ("benchmark", "set", "family", "spec", "status", "error", "finished_utc", "layer", "kind", "op",
                 "kernel", "kernel_type", "exec_type", "fused_into", "successors", "fusion")


def read_table(path: Path, columns: tuple[str, ...]) -> tuple[pd.DataFrame, list[str], set[str]]:
    """One store table (plain or gzip, :data:`~annette_torch.validation.MAX_FILE_BYTES` at
    most): text columns as text ("" when empty), the others as numbers (NaN when empty);
    what was left out; and the benchmarks whose lines were damaged (as far as a damaged
    line names one).

    Repaired, with a :class:`StoreRepairWarning` naming the file, the lines and the
    benchmarks: a last line without its newline (a row cut by a kill), lines with another
    number of cells than the header (a row cut short in the middle) or unbalanced quotes,
    lines with a number column that is not a number. Rejected with :class:`StoreError`
    naming the file: a damaged gzip archive, text that is not UTF-8, a header other than
    ``columns``."""
    try:
        data = read_bytes(path, "store file")
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        content = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise StoreError(f"{path}: not UTF-8 text (byte {error.start}): damaged; restore it from a copy "
                         f"(git checkout) or move it away and measure its benchmarks again") from None
    except (OSError, EOFError, zlib.error, DataError) as error:
        raise StoreError(f"{path}: damaged or unreadable ({first_line(error, with_type=True)}); restore it from a "
                         f"copy (git checkout) or move it away and measure its benchmarks again") from None
    lines = content.split("\n")
    header = ",".join(columns)
    if lines[0] != header:
        found = lines[0].split(",")
        missing = [c for c in columns if c not in found]
        raise StoreError(f"{path}: the header must be {header!r}"
                         + (f"; it lacks the column(s) {', '.join(missing)}" if missing else f", got {lines[0]!r}"))
    cut = len(lines) > 1 and bool(lines[-1])          # the last line lacks its newline: a kill cut it
    rows, numbers, bad = [], [], []
    damaged: set[str] = set()
    for number, line in enumerate(lines[1:] if cut else lines[1:-1], start=2):
        try:
            cells = next(csv.reader([line], strict=True), [])   # one line each: a cut quote spoils no other row
            problem = ("cut off without its newline" if cut and number == len(lines) else
                       f"{len(cells)} of {len(columns)} cells" if len(cells) != len(columns) else "")
        except csv.Error:
            cells, problem = line.split(",", 1), "unbalanced quotes"
        if problem:
            bad.append((number, problem))
            if len(cells) > 1:
                damaged.add(cells[0])
            continue
        rows.append(cells)
        numbers.append(number)
    frame = pd.DataFrame(rows, columns=list(columns), dtype=object)
    numeric = [c for c in columns if c not in _TEXT_COLUMNS]
    wrong = np.zeros(len(frame), dtype=bool)
    for column in numeric:
        cells = frame[column].replace("", np.nan)
        wrong |= pd.to_numeric(cells, errors="coerce").isna().to_numpy() & cells.notna().to_numpy()
    bad += [(n, "a number cell that is not a number") for n, flagged in zip(numbers, wrong) if flagged]
    damaged |= set(frame.loc[wrong, "benchmark"])
    frame = frame[~wrong].reset_index(drop=True)
    for column in columns:
        frame[column] = (pd.to_numeric(frame[column].replace("", np.nan)) if column in numeric
                         else frame[column].astype(str))
    if not bad:
        return frame, [], damaged
    listed = ", ".join(f"{n} ({why})" for n, why in sorted(bad)[:5])
    dropped = [f"line {n}" for n, _ in sorted(bad)]
    named = sorted(damaged)
    who = (f"benchmark(s) {', '.join(named[:5])}{', ...' if len(named) > 5 else ''} count as not measured "
           f"(a campaign run again measures them)" if named else "the benchmark they belonged to is unknown")
    warnings.warn(f"{path}: left out {len(bad)} damaged line(s): {listed}{', ...' if len(bad) > 5 else ''}; {who}",
                  StoreRepairWarning, stacklevel=3)
    return frame, dropped, damaged


def _archive(path: Path) -> Path:
    return path.with_name(path.name + ".gz")


def _table_bytes(table: pd.DataFrame, columns: tuple[str, ...]) -> bytes:
    return (",".join(columns) + "\n").encode() + _csv_bytes(table.to_dict("records"), columns)


def _rewrite(path: Path, table: pd.DataFrame, columns: tuple[str, ...]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(_table_bytes(table, columns))


def read_tables(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(networks, layers) of a store folder through :func:`read_table`: the archive's rows
    (``.csv.gz``, if any), then the live rows of benchmarks the archive does not hold
    (a kill during compaction doubles nothing); the networks one row per benchmark, its
    last (a retry after a failure). A benchmark with a damaged layer line is left out of
    the archive or live pair that has it, so that it counts as not measured."""
    pairs = []
    for networks_path in (_archive(folder / "networks.csv"), folder / "networks.csv"):
        layers_path = networks_path.with_name(networks_path.name.replace("networks", "layers"))
        if networks_path.suffix == ".gz" and not (networks_path.exists() or layers_path.exists()):
            continue
        networks = read_table(networks_path, NETWORK_COLUMNS)[0] if networks_path.exists() or \
            networks_path.suffix != ".gz" else pd.DataFrame(columns=list(NETWORK_COLUMNS))
        layers, damaged = pd.DataFrame(columns=list(LAYER_COLUMNS)), set()
        if layers_path.exists() or layers_path.suffix != ".gz":
            layers, _, damaged = read_table(layers_path, LAYER_COLUMNS)
        pairs.append((networks[~networks["benchmark"].isin(damaged)], layers[~layers["benchmark"].isin(damaged)]))
    (networks, layers), archive = pairs[-1], pairs[:-1]
    if archive:
        old_networks, old_layers = archive[0]
        layers = layers[~layers["benchmark"].isin(set(old_layers["benchmark"]))]
        layers = pd.concat([old_layers, layers], ignore_index=True) if len(layers) else old_layers
        networks = pd.concat([old_networks, networks], ignore_index=True) if len(networks) else old_networks
    return networks.drop_duplicates("benchmark", keep="last").reset_index(drop=True), layers.reset_index(drop=True)


def read_fingerprint(folder: str | os.PathLike) -> dict[str, Any]:
    """A store's ``fingerprint.json``, validated: an object whose ``backend`` can name a
    file (:func:`~annette_torch.validation.safe_name`: a profile fitted on the store is
    named after it), ``threads`` a positive integer, ``precision`` and
    ``runtime_version`` strings; :class:`StoreError` naming the file and field otherwise."""
    path = Path(folder) / "fingerprint.json"
    try:
        data = read_json(path, "store fingerprint")
        if not isinstance(data, dict):
            raise DataError(f"store fingerprint {path}: expected a JSON object, got {data!r}")
        safe_name(data.get("backend"), f"store fingerprint {path}: field 'backend'")
        data["threads"] = integer(data.get("threads"), f"store fingerprint {path}: field 'threads'", 1)
        for name in ("precision", "runtime_version"):
            text(data.get(name), f"store fingerprint {path}: field {name!r}")
    except DataError as error:
        raise StoreError(str(error)) from None
    return data


def load_measurements(folder: str | os.PathLike) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """(fingerprint, networks, layers) of one store folder, read-only and without
    locking, through :func:`read_fingerprint` and :func:`read_tables` (which repair or
    reject damaged files); layer rows of uncommitted benchmarks are left out."""
    folder = Path(folder)
    if not (folder / "fingerprint.json").is_file():
        raise StoreError(f"{folder} is not a measurement store (no fingerprint.json)")
    fingerprint = read_fingerprint(folder)
    networks, layers = read_tables(folder)
    return fingerprint, networks, layers[layers["benchmark"].isin(set(networks["benchmark"]))].reset_index(drop=True)


def read_references(folder: str | os.PathLike) -> pd.DataFrame:
    """The reference networks measured into a store folder (:data:`REFERENCE_COLUMNS`),
    the last measurement of each; an empty table when the store has none."""
    path = Path(folder) / "references.csv"
    if not path.exists():
        return pd.DataFrame(columns=list(REFERENCE_COLUMNS))
    table = read_table(path, REFERENCE_COLUMNS)[0]
    return table.drop_duplicates("benchmark", keep="last").reset_index(drop=True)


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

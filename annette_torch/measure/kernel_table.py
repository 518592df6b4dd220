"""Kernels measured in context on this machine: a table the estimator consults before its layer models.

    table = MeasuredKernels.load("measured/onnxruntime-cpu-1t-f32-1.32.0-c13e1653")
    est = Estimator("onnxruntime-cpu", measured=table)       # or measured=<that folder>

``annette-torch calibrate --for MODEL ...`` (:mod:`annette_torch.calibration.in_context`)
profiles whole networks and writes the time of each distinct kernel it ran (or, with
``--method end-to-end``, fits them to the networks' end-to-end times). A kernel is
keyed by its *signature*, what every layer model reads, as the NAS signature cache
(:mod:`annette_torch.nas.cache`) keys it: its kind, the kinds of the layers fused into it
and its feature row (:data:`~annette_torch.kinds.FEATURES`, written with 17 significant
digits so that the text is exact). Equal signatures are the same work, so a kernel
measured in one network answers for it in every network.

A table is a folder under a root, named like a measurement store
(:func:`~annette_torch.calibration.store.fingerprint_folder`): ``fingerprint.json`` (the
backend that measured), ``protocol.json`` (:mod:`.record`) and ``kernels.csv``, one row
per kernel, appended (one ``write`` and ``fsync`` per network) and never rewritten; a
last line cut by a kill is ignored, and where a signature repeats the last row wins.
Loading validates every row (finite, non-negative times; known columns), naming the
file and line of a bad one; nothing in it is executed.

A table fitted to whole networks (``--method end-to-end``) also holds ``scale.json``: the
one factor its fit found between the profile's estimates and this machine's networks. The
estimator multiplies the layer models' times of the kernels the table lacks by it, so a
network mixing measured and modelled kernels is on one footing (replayed on recorded
ground truth, 10 MobileNetV2-space candidates fitted and 10 predicted: 8.8 % -> 3.1 % with
the shipped profile on another CPU, 3.9 -> 3.3 % with an adapted one;
``benchmarks/end_to_end_fit.py``). Without the file the scale is 1.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..atomic import atomic_path
from ..kinds import FEATURES
from ..validation import DataError, number, read_json, read_text

_IN = FEATURES.index("input_elems")
KERNEL_COLUMNS = ("signature", "kind", "fused", *FEATURES, "time_ms", "spread", "occurrences", "tie", "network",
                  "measured_utc")
KERNELS_FILE = "kernels.csv"
SCALE_FILE = "scale.json"
#: the range a table's scale may take: a profile further off than this describes another device
SCALE_LIMITS = (0.02, 50.0)
#: how a measured kernel time was tied to the estimator's kernel: the profile's kernels
#: computing exactly its layers, or a group of the runtime's kernels that computed several
#: of the estimator's kernels, split between them in proportion to the layer models, or
#: fitted to whole networks' end-to-end times (:mod:`annette_torch.calibration.end_to_end`)
TIES = ("exact", "shared", "fitted")
#: the fingerprint fields a profile must share with the table it consults
MATCHING = ("backend", "threads", "precision")


class KernelTableError(ValueError):
    """A measured-kernels table cannot be read, or does not describe the profile's device."""


def signature(kind: str, layer_kinds: Sequence[str], features: Sequence[float]) -> str:
    """The text key of one kernel: ``kind|fused kinds|features`` (exact: 17 significant digits)."""
    return f"{kind}|{'+'.join(layer_kinds[1:])}|" + ",".join(format(float(v), ".17g") for v in features)


def signature_features(table: Any) -> np.ndarray:
    """The features a :class:`~annette_torch.mapping.KernelTable`'s kernels are keyed by: its
    ``features``, input elements counting what fused layers read from outside whatever the
    profile's counting (a table measured under one ``post_op_inputs`` serves profiles of the
    other)."""
    if getattr(table, "omitted_inputs", None) is None:
        return table.features
    features = table.features.copy()
    features[:, _IN] += table.omitted_inputs
    return features


def kernel_signatures(table: Any) -> list[str]:
    """The signature of every kernel of a :class:`~annette_torch.mapping.KernelTable`
    (:func:`signature` of its :func:`signature_features`)."""
    return [signature(kind, kinds, row) for kind, kinds, row in zip(table.kinds, table.layer_kinds,
                                                                     signature_features(table))]


def _table_under(root: Path, fingerprint: dict[str, Any]) -> Path:
    """The one table folder directly under ``root`` measured with ``fingerprint``'s backend,
    threads and precision (``root`` itself when there is none, so the caller's error names it)."""
    from ..calibration.store import store_folders

    matches = []
    for candidate in store_folders(root):
        try:
            recorded = read_json(candidate / "fingerprint.json", "measured-kernels fingerprint")
        except ValueError:
            continue
        if isinstance(recorded, dict) and all(recorded.get(k) == fingerprint.get(k) for k in MATCHING):
            matches.append(candidate)
    if len(matches) > 1:
        raise KernelTableError(f"{root} holds several tables for {', '.join(f'{k}={fingerprint.get(k)}' for k in MATCHING)}: "
                               f"{', '.join(m.name for m in matches)}; pass one of them")
    return matches[0] if matches else root


class MeasuredKernels:
    """One device's kernels measured in context: ``fingerprint``, the protocol ``record``
    and ``times_ms`` (signature -> time in ms), and the ``scale`` of the kernels it lacks;
    see the module doc."""

    def __init__(self, folder: Path, fingerprint: dict[str, Any], record: dict[str, Any] | None,
                 times_ms: dict[str, float], scale: float = 1.0) -> None:
        self.folder = folder
        self.fingerprint = fingerprint
        self.record = record
        self.times_ms = times_ms
        self.scale = scale

    def __repr__(self) -> str:
        scale = f", scale {self.scale:.3f} for the other kernels" if self.scale != 1.0 else ""
        return f"MeasuredKernels({str(self.folder)!r}, {len(self.times_ms)} kernels{scale})"

    def __len__(self) -> int:
        return len(self.times_ms)

    @classmethod
    def load(cls, folder: str | os.PathLike, fingerprint: dict[str, Any] | None = None) -> MeasuredKernels:
        """Read and validate the table in ``folder``, or, when ``folder`` is the root that
        ``calibrate --for --out`` wrote, in its one subfolder whose backend, threads and
        precision are those of ``fingerprint`` (``KernelTableError`` names what is wrong)."""
        from .record import read_record

        folder = Path(folder)
        if not (folder / "fingerprint.json").is_file() and fingerprint is not None:
            folder = _table_under(folder, fingerprint)
        fingerprint_path = folder / "fingerprint.json"
        if not fingerprint_path.is_file():
            raise KernelTableError(f"{folder} is not a table of measured kernels (no fingerprint.json); "
                                   f"make one with annette-torch calibrate --for MODEL --backend B --out DIR")
        try:
            fingerprint = read_json(fingerprint_path, "measured-kernels fingerprint")
            record = read_record(folder)
        except DataError as error:
            raise KernelTableError(str(error)) from None
        if not isinstance(fingerprint, dict) or not all(k in fingerprint for k in MATCHING):
            raise KernelTableError(f"{fingerprint_path}: needs the fields {', '.join(MATCHING)}")
        return cls(folder, fingerprint, record, read_kernels(folder / KERNELS_FILE), read_scale(folder / SCALE_FILE))

    def check_profile(self, fingerprint: dict[str, Any], name: str) -> None:
        """``KernelTableError`` unless the profile ``name`` with ``fingerprint`` describes
        the backend, threads and precision this table was measured with."""
        differ = [f"{k} {self.fingerprint.get(k)!r} (the profile's: {fingerprint.get(k)!r})" for k in MATCHING
                  if self.fingerprint.get(k) != fingerprint.get(k)]
        if differ:
            raise KernelTableError(f"the measured kernels in {self.folder} were measured with {', '.join(differ)}; "
                                   f"profile {name!r} describes another device. Use a profile of that backend, "
                                   f"threads and precision")

    def lookup(self, table: Any) -> np.ndarray:
        """Per kernel of a :class:`~annette_torch.mapping.KernelTable`: its measured time in
        ms, NaN where the table has none."""
        return np.array([self.times_ms.get(s, math.nan) for s in kernel_signatures(table)], dtype=float)


def read_scale(path: Path) -> float:
    """The scale of ``scale.json`` (1 when missing): a number within :data:`SCALE_LIMITS`;
    ``KernelTableError`` names the file otherwise."""
    if not path.exists():
        return 1.0
    try:
        data = read_json(path, "measured-kernels scale")
        if not isinstance(data, dict):
            raise DataError(f"{path}: expected an object with the field 'scale'")
        return number(data.get("scale"), f"{path}: field 'scale'", low=SCALE_LIMITS[0], high=SCALE_LIMITS[1])
    except DataError as error:
        raise KernelTableError(str(error)) from None


def write_scale(folder: Path, scale: float, networks: int) -> None:
    """Write ``scale.json`` (atomically): the scale of a fit to ``networks`` whole networks;
    ``KernelTableError`` if it lies outside :data:`SCALE_LIMITS` (the profile describes
    another device), before anything is written."""
    try:
        number(scale, "the fitted scale", low=SCALE_LIMITS[0], high=SCALE_LIMITS[1])
    except DataError as error:
        raise KernelTableError(f"{folder}: {error}; the profile's estimates are that far from these networks' "
                               f"times, so it does not describe this device: use one calibrated or adapted "
                               f"here") from None
    with atomic_path(folder / SCALE_FILE) as tmp:
        tmp.write_text(json.dumps({"scale": float(scale), "networks": int(networks)}) + "\n")


def read_kernels(path: Path) -> dict[str, float]:
    """Signature -> time of ``kernels.csv`` (empty when missing), read through the
    validation layer (a regular file within its size limit); the last row of a signature
    wins; ``KernelTableError`` names the file, and the line of a malformed row."""
    if not path.exists():
        return {}
    try:
        text = read_text(path, "measured-kernels table")
    except DataError as error:
        raise KernelTableError(str(error)) from None
    complete = text[: text.rfind("\n") + 1]                  # a last line cut by a kill is left out
    reader = csv.DictReader(io.StringIO(complete))
    try:
        header, rows = tuple(reader.fieldnames or ()), list(reader)
    except csv.Error as error:
        raise KernelTableError(f"{path} line {reader.line_num}: not readable as CSV ({error})") from None
    if header != KERNEL_COLUMNS:
        raise KernelTableError(f"{path}: the header must be {','.join(KERNEL_COLUMNS)}")
    times = {}
    for line, row in enumerate(rows, start=2):
        try:
            time_ms = float(row["time_ms"])
        except (TypeError, ValueError):
            raise KernelTableError(f"{path} line {line}: field 'time_ms' is not a number: {row['time_ms']!r}") from None
        if not (math.isfinite(time_ms) and time_ms >= 0):
            raise KernelTableError(f"{path} line {line}: field 'time_ms' must be finite and >= 0, got {time_ms}")
        if not row["signature"] or row["signature"].count("|") != 2:
            raise KernelTableError(f"{path} line {line}: field 'signature' is malformed: {row['signature']!r}")
        if row["tie"] not in TIES:
            raise KernelTableError(f"{path} line {line}: field 'tie' must be one of {', '.join(TIES)}, got {row['tie']!r}")
        times[row["signature"]] = time_ms
    return times


def append_kernels(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` (dicts of :data:`KERNEL_COLUMNS`) to ``kernels.csv``: :func:`append_rows`."""
    append_rows(path, KERNEL_COLUMNS, rows)


def append_rows(path: Path, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` (dicts of ``columns``) to the CSV file ``path`` with one write and
    ``fsync``, the header first when the file is new, floats with 17 significant digits;
    a last row cut by a kill is dropped first."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, lineterminator="\n")
    new = not path.exists() or path.stat().st_size == 0
    if new:
        writer.writeheader()
    elif not path.read_bytes().endswith(b"\n"):              # a row cut by a kill: drop it
        with open(path, "rb+") as handle:
            handle.truncate(path.read_bytes().rfind(b"\n") + 1)
    for row in rows:
        writer.writerow({k: (format(v, ".17g") if isinstance(v, float) else v) for k, v in row.items()})
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(buffer.getvalue().encode())
        while view:
            view = view[os.write(descriptor, view):]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)

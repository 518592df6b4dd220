"""Sweep files: which benchmark networks a calibration campaign builds.

A sweep is a CSV file: one shipped with the package, named like ``quick``
(``annette_torch/calibration/sweeps/<name>.csv``, package data, :func:`sweep_names`),
or any path. Lines starting with ``#`` are comments. Each row asks for benchmarks of one
*family* (see :mod:`.generator`) and has the columns ``family, count`` followed by the
parameter columns :data:`PARAMETERS`. A parameter cell is

* empty: the family's default (or not used by the family),
* ``64`` or ``relu``: that value,
* ``1|3|5|7``: one of these, drawn uniformly,
* ``8..2048``: an integer drawn log-uniformly from the range,
* ``1..64:1``: every value of the range with that step (a grid).

A row yields the cartesian product of its grid cells, and for each grid point ``count``
random draws of the other cells (``count`` may be empty for 1). Draws are seeded by the
sweep's name and the row, so a sweep always yields the same benchmarks; each benchmark's
id is a hash of its family and parameters, which is what makes campaigns resumable.
Benchmarks above :data:`MAX_OPS` operations or :data:`MAX_ELEMS` activation elements
are redrawn (random cells) or skipped (grid points) to keep single runs short; a sweep
may set its own limits with comment lines ``# max_ops: 2e10`` and ``# max_elems: 1e8``
(a training sweep needs the large batched convs real networks have).
"""
from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
import random
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..validation import DataError, number, read_text, regular_file

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

PARAMETERS = ("n", "h", "w", "c", "f", "k", "stride", "groups", "op", "pool")
MAX_OPS = 4e9          # multiply-adds x 2 of one benchmark network (a VGG conv is 3.7e9)
MAX_ELEMS = 24e6       # elements of the largest activation tensor
MAX_COUNT = 10000      # draws per row, and values per grid cell
_REDRAWS = 200
_LIMIT = re.compile(r"#\s*(max_ops|max_elems)\s*:\s*(\S+)\s*$")


class SweepError(ValueError):
    """A sweep file that cannot be read: names the file, the row and the problem."""


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark network to build: its family and parameters; ``id`` is stable."""

    family: str
    params: dict[str, Any] = field(hash=False)

    @property
    def id(self) -> str:
        text = json.dumps([self.family, self.params], sort_keys=True)
        return f"{self.family}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"

    def to_json(self) -> str:
        return json.dumps({"family": self.family, "params": self.params}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BenchmarkSpec:
        data = json.loads(text)
        return cls(data["family"], data["params"])


@dataclass(frozen=True)
class _Cell:
    kind: str            # "fixed", "choice", "range", "grid"
    values: tuple

    def draw(self, rng: random.Random) -> Any:
        if self.kind == "fixed":
            return self.values[0]
        if self.kind == "choice":
            return rng.choice(self.values)
        lo, hi = self.values
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1) - 1e-9)) - 0.5)) \
            if lo > 0 else rng.randint(lo, hi)


def _value(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return text


def _parse_cell(text: str) -> _Cell | None:
    text = text.strip()
    if not text:
        return None
    if "|" in text:
        return _Cell("choice", tuple(_value(v.strip()) for v in text.split("|")))
    if ".." in text:
        bounds, _, step = text.partition(":")
        lo, hi = (int(v) for v in bounds.split(".."))
        if lo > hi:
            raise ValueError(f"range {text!r} is empty")
        if step:
            if int(step) < 1 or (hi - lo) // int(step) >= MAX_COUNT:
                raise ValueError(f"grid {text!r}: the step must be positive and give at most {MAX_COUNT} values")
            return _Cell("grid", tuple(range(lo, hi + 1, int(step))))
        return _Cell("range", (lo, hi))
    return _Cell("fixed", (_value(text),))


def sweeps_folder() -> Traversable:
    """The sweeps shipped with the package (``annette_torch/calibration/sweeps``, package
    data found through :mod:`importlib.resources`, so an installed wheel has them too)."""
    return resources.files(__package__).joinpath("sweeps")


def sweep_names() -> list[str]:
    """Names of the shipped sweeps (``smoke``, ``quick``, ``full``, ...)."""
    return sorted(entry.name[:-len(".csv")] for entry in sweeps_folder().iterdir()
                  if entry.name.endswith(".csv") and entry.is_file())


def sweep_path(name_or_path: str | os.PathLike) -> Path | Traversable:
    """The sweep file for a path, or for the name of a shipped sweep (``quick``)."""
    path = Path(name_or_path)
    if path.suffix == ".csv" or path.exists():
        try:
            return regular_file(path, "sweep file")
        except DataError as error:
            raise SweepError(str(error)) from None
    candidate = sweeps_folder().joinpath(f"{name_or_path}.csv")
    if candidate.is_file():
        return candidate
    raise SweepError(f"no sweep named {name_or_path!r}; known sweeps: {', '.join(sweep_names()) or 'none'} "
                     f"(shipped in {sweeps_folder()}), or pass the path of a sweep CSV file")


def load_sweep(name_or_path: str | os.PathLike) -> list[BenchmarkSpec]:
    """The benchmarks of a sweep file, in file order, without duplicates (see module doc)."""
    from .generator import FAMILIES

    path = sweep_path(name_or_path)
    stem = Path(path.name).stem        # seeds the draws: a sweep's benchmarks do not depend on where it lies
    try:
        text = (read_text(path, "sweep file") if isinstance(path, Path) else path.read_text()).splitlines()
    except DataError as error:
        raise SweepError(str(error)) from None
    limits = {"max_ops": MAX_OPS, "max_elems": MAX_ELEMS}
    for line in text:
        if match := _LIMIT.match(line.strip()):
            try:
                limits[match[1]] = number(float(match[2]), f"{path}: {match[1]}", low=0, low_open=True)
            except ValueError:
                raise SweepError(f"{path}: {match[1]} must be a positive number, got {match[2]!r}") from None
    lines = [line for line in text if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    expected = ("family", "count") + PARAMETERS
    if tuple(reader.fieldnames or ()) != expected:
        raise SweepError(f"{path}: the header must be {','.join(expected)}, got {','.join(reader.fieldnames or [])}")
    specs: dict[str, BenchmarkSpec] = {}
    for row_number, row in enumerate(reader, start=1):
        where = f"{path}, row {row_number}"
        if None in row or None in row.values():
            cells = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None) or ())
            raise SweepError(f"{where}: {cells} cell(s), but the header has {len(expected)} ({','.join(expected)}); "
                             f"leave unused cells empty, not out")
        family = row["family"].strip()
        if family not in FAMILIES:
            raise SweepError(f"{where}: unknown family {family!r}; families: {', '.join(sorted(FAMILIES))}")
        try:
            count = int(row["count"]) if row["count"].strip() else 1
            if not 1 <= count <= MAX_COUNT:
                raise ValueError(f"count must be between 1 and {MAX_COUNT}, got {count}")
            cells = {p: c for p in PARAMETERS if (c := _parse_cell(row[p] or "")) is not None}
        except ValueError as error:
            raise SweepError(f"{where}: {error}") from None
        grid_names = [p for p, c in cells.items() if c.kind == "grid"]
        rng = random.Random(f"{stem}:{row_number}")
        made, last_error = 0, "every draw was above the size limits"
        for point in itertools.product(*(cells[p].values for p in grid_names)):
            for _ in range(count):
                spec, error = _draw(family, cells, dict(zip(grid_names, point)), rng, **limits)
                if spec is not None:
                    specs.setdefault(spec.id, spec)
                    made += 1
                last_error = error or last_error
        if not made:
            raise SweepError(f"{where}: the row makes no benchmark: {last_error}")
    return list(specs.values())


def _draw(family: str, cells: dict[str, _Cell], fixed: dict[str, Any], rng: random.Random,
          max_ops: float = MAX_OPS, max_elems: float = MAX_ELEMS) -> tuple[BenchmarkSpec | None, str | None]:
    """A spec within the size limits, redrawing the random cells; else (None, why).
    Grid points that make no network (a pool window larger than the input) are skipped."""
    from .generator import estimate_size

    random_cells = {p: c for p, c in cells.items() if c.kind != "grid"}
    tries = _REDRAWS if any(c.kind in ("range", "choice") for c in random_cells.values()) else 1
    error = None
    for _ in range(tries):
        params = {**{p: c.draw(rng) for p, c in random_cells.items()}, **fixed}
        spec = BenchmarkSpec(family, dict(sorted(params.items())))
        try:
            ops, elems = estimate_size(spec)
        except ValueError as invalid:
            error = str(invalid)
            continue
        if ops <= max_ops and elems <= max_elems:
            return spec, None
    return None, error

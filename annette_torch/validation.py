"""The one validation layer for what annette_torch reads from disk or is handed as data.

Profiles, adaptations, device descriptors, measurement stores, sweeps and board
configurations all come through here:

* :func:`regular_file`, :func:`read_bytes`, :func:`read_text`, :func:`read_json`: a file
  that exists and is a regular file, at most :data:`MAX_FILE_BYTES` long; JSON nested at
  most :data:`MAX_DEPTH` deep;
* :func:`number`, :func:`integer`, :func:`boolean`, :func:`text`: a value of the right
  type (``true`` is not 1, ``"1.5"`` is not 1.5, 1.5 is not an index), finite and in
  its range;
* :func:`safe_name`: a name from data that becomes part of a path (a profile named by a
  store's backend): no separators, no ``..``, nothing absolute or hidden.

Every failure is a :class:`DataError` whose message names the file (when there is one),
the field and the rule; callers prefix their own context (``profile X: field ...``).
"""
from __future__ import annotations

import json
import math
import numbers
import os
import re
from pathlib import Path
from typing import Any

#: the largest file any reader here accepts (profiles, stores, sweeps, configurations)
MAX_FILE_BYTES = 256 * 2 ** 20
#: the deepest nesting of JSON arrays and objects a file may have
MAX_DEPTH = 64
_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}")


class DataError(ValueError):
    """A file or value breaks a rule of the validation layer; the message names the file
    or field and the rule."""


def regular_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a Path; :class:`DataError` saying "does not exist" or "is not a
    regular file" (a folder, a device) otherwise. ``what`` names the file's role."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"{what} {path} does not exist")
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file"
        raise DataError(f"{what} {path} is {kind}; give the path of a file")
    return path


def read_bytes(path: str | os.PathLike, what: str, limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` (default :data:`MAX_FILE_BYTES`)
    bytes (see :func:`regular_file`)."""
    path = regular_file(path, what)
    limit = MAX_FILE_BYTES if limit is None else limit
    size = path.stat().st_size
    if size > limit:
        raise DataError(f"{what} {path} has {size:,} bytes, more than the {limit:,} this reader accepts")
    try:
        return path.read_bytes()
    except OSError as error:
        raise DataError(f"{what} {path}: cannot read it ({error.strerror})") from None


def read_text(path: str | os.PathLike, what: str, limit: int | None = None) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{what} {path}: not UTF-8 text (byte {error.start})") from None


def parse_json(text: str, where: str) -> Any:
    """``text`` parsed as JSON nested at most :data:`MAX_DEPTH` deep; :class:`DataError`
    naming ``where`` otherwise. ``NaN`` and ``Infinity`` parse (as Python's json does) so
    that the field check that rejects them (:func:`number`) can name the field."""
    depth = _nesting(text)
    if depth > MAX_DEPTH:
        raise DataError(f"{where}: JSON nested {depth} levels deep, more than the {MAX_DEPTH} allowed")
    try:
        return json.loads(text)
    except ValueError as error:
        raise DataError(f"{where}: not readable as JSON ({error})") from None


def read_json(path: str | os.PathLike, what: str, limit: int | None = None) -> Any:
    """A regular file's JSON (see :func:`parse_json`); errors name ``what`` and the path."""
    path = Path(path).expanduser()
    return parse_json(read_text(path, what, limit), f"{what} {path}")


def _nesting(text: str) -> int:
    """How deep ``[`` and ``{`` nest in ``text``, outside strings (a linear scan: deep
    nesting must not reach a recursive parser)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def number(value: Any, where: str, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> float:
    """``value`` as a float: a JSON/Python number (not a bool, not a string), finite, at
    least ``low`` (above it with ``low_open``) and at most ``high``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise DataError(f"{where}: expected a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        rule = "positive" if (low, low_open) == (0, True) else f"{'>' if low_open else '>='} {low:g}"
        raise DataError(f"{where}: must be {rule}, got {value!r}")
    if high is not None and value > high:
        raise DataError(f"{where}: must be <= {high:g}, got {value!r}")
    return float(value)


def integer(value: Any, where: str, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int: an integer (not a bool, not 1.5, not ``"3"``; 3.0 is 3) in
    ``[low, high]``."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral)
                                       or (isinstance(value, float) and value.is_integer())):
        raise DataError(f"{where}: expected an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"<= {high}" if low is None else f"between {low} and {high}"
        raise DataError(f"{where}: must be {bounds}, got {value!r}")
    return int(value)


def boolean(value: Any, where: str) -> bool:
    """``value`` if it is ``true`` or ``false`` (not 0, 1 or ``"yes"``)."""
    if not isinstance(value, bool):
        raise DataError(f"{where}: expected true or false, got {value!r}")
    return value


def text(value: Any, where: str) -> str:
    """``value`` if it is a string."""
    if not isinstance(value, str):
        raise DataError(f"{where}: expected a string, got {value!r}")
    return value


def safe_name(value: Any, where: str) -> str:
    """``value`` if it can name a file inside a folder: 1 to 128 of letters, digits and
    ``._+-``, not starting with a dot (so no ``..``, no hidden file), no separators, not
    absolute. Every path built from data goes through here."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise DataError(f"{where}: {value!r} cannot name a file: use 1 to 128 letters, digits and '._+-', "
                        f"not starting with '.' (no '/', '\\' or '..')")
    return value

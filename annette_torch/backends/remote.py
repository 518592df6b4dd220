"""What the board backends share: their configuration file and the commands they run.

A board backend (``zcu102``, ``ncs2``) drives tools outside this Python process: a
toolchain in another environment, an older interpreter, a board reached over SSH. It
is configured by one file per board (TOML on Python >= 3.11, or JSON; documented
examples, shipped as package data in ``annette_torch/backends/boards/``:
:func:`example_config`) read by :class:`BoardConfig`, which names the missing or
wrong key and how to set it.

Every command is a :class:`Command`: an argument list run without a shell, with a
timeout, shown by ``dry_run`` exactly as it would run. :func:`run_command` runs one and
raises :class:`CommandFailed` with the tail of its output; :func:`with_retries` repeats a
step whose failure may pass (a board that hangs or reboots) and gives up with a
:class:`~annette_torch.backends.BackendError` naming the step after the last attempt.
:class:`Ssh` builds the system ``ssh``/``scp`` command lines (BatchMode, ConnectTimeout,
keep-alives), so no SSH library is needed.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from ..validation import DataError, parse_json, read_text
from .base import BackendError

T = TypeVar("T")
_REQUIRED = object()
_TAIL_CHARS = 600


class BoardConfigError(ValueError):
    """A board configuration file is missing, unreadable or lacks a key."""


def example_config(board: str) -> str:
    """Where the documented example configuration of ``board`` (``zcu102``, ``ncs2``) is
    installed: package data (``annette_torch/backends/boards/<board>.example.toml``)."""
    return str(resources.files(__package__).joinpath("boards", f"{board}.example.toml"))


def runner_report(text: str, source: str, report_format: str, script: str) -> dict:
    """A runner script's JSON report as a dict; :class:`ReportError` when ``text`` is not
    JSON or not a report of ``report_format`` (written by ``script``)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReportError(f"{source} is not JSON: {error}") from None
    if not isinstance(data, dict) or data.get("format") != report_format:
        raise ReportError(f"{source} is not a {script} report (format {report_format!r})")
    return data


def times_ms(value: Any, where: str) -> tuple[float, ...]:
    """A report's list of non-negative times in ms; :class:`ReportError` names ``where``."""
    if not isinstance(value, list) or not all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0
                                              for t in value):
        raise ReportError(f"{where} must be a list of non-negative numbers (milliseconds)")
    return tuple(float(t) for t in value)


class ReportError(ValueError):
    """A profiler report does not have the expected format (nothing from it is stored)."""


class BoardConfig:
    """A board configuration file: sections of keys, read with :meth:`get`.

    ``path``: the file (``.toml`` or ``.json``). ``example``: the documented example to
    point users to in error messages.
    """

    def __init__(self, path: str | os.PathLike | None, example: str) -> None:
        self.example = example
        if path is None:
            raise BoardConfigError(
                f"this backend needs a board configuration file: pass --config FILE (or config=FILE); "
                f"start from a copy of {example}")
        self.path = Path(path).expanduser()
        self.data = self._read()

    def _read(self) -> dict[str, Any]:
        """The file's tables, through the validation layer (a regular file of bounded size,
        strict JSON); :class:`BoardConfigError` naming the file otherwise."""
        try:
            text = read_text(self.path, "board configuration file")
            if self.path.suffix == ".json":
                data = parse_json(text, str(self.path))
            elif self.path.suffix == ".toml":
                try:
                    import tomllib
                except ModuleNotFoundError:   # Python 3.10
                    raise BoardConfigError(f"{self.path}: reading TOML needs Python >= 3.11; write the same keys "
                                           f"as JSON (sections become objects) in a .json file") from None
                data = tomllib.loads(text)
            else:
                raise BoardConfigError(f"{self.path}: a board configuration is a .toml or .json file")
        except BoardConfigError:
            raise
        except DataError as error:
            hint = f"; start from a copy of {self.example}" if not self.path.is_file() else ""
            raise BoardConfigError(f"{error}{hint}") from None
        except (ValueError, RecursionError) as error:
            raise BoardConfigError(f"{self.path} is not valid {self.path.suffix[1:].upper()}: {error}") from None
        if not isinstance(data, dict):
            raise BoardConfigError(f"{self.path}: the top level must be a table of sections")
        return data

    def get(self, section: str, key: str, default: Any = _REQUIRED, kind: type | tuple[type, ...] | None = None,
            what: str = "") -> Any:
        """The value of ``[section] key``; a missing required key or a value of the wrong
        ``kind`` raises :class:`BoardConfigError` naming the key, ``what`` it means and
        the example file."""
        table = self.data.get(section, {})
        if not isinstance(table, dict):
            raise BoardConfigError(f"{self.path}: [{section}] must be a table of keys")
        if key not in table:
            if default is _REQUIRED:
                meaning = f" ({what})" if what else ""
                raise BoardConfigError(f"{self.path}: missing key '{key}' in section [{section}]{meaning}; "
                                       f"set it as in {self.example}")
            return default
        value = table[key]
        if kind is not None:
            kinds = kind if isinstance(kind, tuple) else (kind,)
            if float in kinds and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if isinstance(value, float) and not math.isfinite(value):
                raise BoardConfigError(f"{self.path}: [{section}] {key} must be a finite number, got {value!r}")
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                names = " or ".join(k.__name__ for k in kinds)
                raise BoardConfigError(f"{self.path}: [{section}] {key} must be of type {names}, got {value!r}")
        return value

    def choice(self, section: str, key: str, choices: Sequence[str], default: Any = _REQUIRED) -> str:
        """A string value that must be one of ``choices``."""
        value = self.get(section, key, default, str)
        if value not in choices:
            raise BoardConfigError(f"{self.path}: [{section}] {key} must be one of {', '.join(choices)}, "
                                   f"got {value!r}")
        return value

    def seconds(self, section: str, key: str, default: float) -> float:
        """A positive number of seconds."""
        value = self.get(section, key, default, (int, float))
        if value <= 0:
            raise BoardConfigError(f"{self.path}: [{section}] {key} must be a positive number of seconds")
        return float(value)

    def count(self, section: str, key: str, default: int, minimum: int = 0) -> int:
        """An integer of at least ``minimum``."""
        value = self.get(section, key, default, int)
        if value < minimum:
            raise BoardConfigError(f"{self.path}: [{section}] {key} must be an integer >= {minimum}")
        return value

    def strings(self, section: str, key: str, default: Sequence[str] = ()) -> list[str]:
        """A list of strings."""
        value = self.get(section, key, list(default), list)
        if not all(isinstance(v, str) for v in value):
            raise BoardConfigError(f"{self.path}: [{section}] {key} must be a list of strings")
        return list(value)


@dataclass(frozen=True)
class Command:
    """One command line: ``argv`` run without a shell, ``timeout_s`` before it is killed,
    ``what`` says in words what it does (used in error messages), ``config_key`` names
    the configuration key that sets its program (used when the program is missing)."""

    argv: tuple[str, ...]
    timeout_s: float
    what: str
    config_key: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


class CommandFailed(RuntimeError):
    """A command exited non-zero, timed out or could not start; ``transient`` says whether
    trying again may help (a timeout, a lost connection)."""

    def __init__(self, message: str, transient: bool, returncode: int | None = None, output: str = "") -> None:
        super().__init__(message)
        self.transient = transient
        self.returncode = returncode
        self.output = output


def _tail(text: str) -> str:
    """The last lines of a program's output on one line (`` | `` between them), at most
    ``_TAIL_CHARS`` long: error reports keep only their first line, and a program's
    own error is usually its last."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    joined = " | ".join(lines[-6:])
    return joined if len(joined) <= _TAIL_CHARS else "..." + joined[-_TAIL_CHARS:]


def run_command(command: Command, cwd: str | os.PathLike | None = None,
                transient_codes: Sequence[int] = ()) -> str:
    """Run ``command``; return its standard output. Raises :class:`CommandFailed`: when the
    program is missing (naming ``command.config_key``), when it runs past its timeout
    (transient; the process group is killed), or when it exits non-zero (transient when
    the code is in ``transient_codes``), with the tail of its output."""
    program = command.argv[0]
    if shutil.which(program, path=os.environ.get("PATH")) is None and not Path(program).is_file():
        key = f"; set its path with {command.config_key}" if command.config_key else ""
        raise CommandFailed(f"{command.what}: program {program!r} not found{key}", transient=False)
    env = {**os.environ, **command.env} if command.env else None
    try:
        process = subprocess.Popen(command.argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    except OSError as error:
        raise CommandFailed(f"{command.what}: cannot start {program!r}: {error}", transient=False) from None
    try:
        stdout, stderr = process.communicate(timeout=command.timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):   # already ended
            os.killpg(process.pid, 9)
        stdout, stderr = process.communicate()
        raise CommandFailed(f"{command.what}: no answer within {command.timeout_s:g} s (killed)", transient=True,
                            output=_tail(stderr or stdout)) from None
    if process.returncode != 0:
        tail = _tail(stderr) or _tail(stdout)
        raise CommandFailed(f"{command.what}: exit code {process.returncode}" + (f": {tail}" if tail else ""),
                            transient=process.returncode in transient_codes, returncode=process.returncode,
                            output=tail)
    return stdout


def with_retries(backend: str, step: str, attempt: Callable[[], T], retries: int, wait_s: float,
                 log: Callable[[str], None] = print) -> T:
    """``attempt()``; when it raises a transient :class:`CommandFailed`, wait ``wait_s`` and
    try again, at most ``retries`` more times. The last failure (or a failure that is not
    transient) raises :class:`BackendError` for ``step`` saying how many attempts ran."""
    for number in range(retries + 1):
        try:
            return attempt()
        except CommandFailed as error:
            if not error.transient or number == retries:
                attempts = f" (after {number + 1} attempts)" if number else ""
                raise BackendError(backend, step, RuntimeError(f"{error}{attempts}")) from error
            log(f"{backend}: {step} failed ({error}); attempt {number + 2} of {retries + 1} in {wait_s:g} s")
            time.sleep(wait_s)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Ssh:
    """The system ``ssh``/``scp`` for one board: ``user@host:port`` with an optional
    ``key`` file, non-interactive (BatchMode: a missing key fails at once instead of
    asking for a password), ``connect_timeout_s`` to reach it and keep-alives so that a
    board that stops answering ends the session."""

    host: str
    user: str
    port: int = 22
    key: str = ""
    connect_timeout_s: float = 10.0
    ssh: str = "ssh"
    scp: str = "scp"
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """``ValueError`` unless ``user`` and ``host`` are plain names (see :data:`SSH_USER`,
        :data:`SSH_HOST`): nothing from a configuration reaches ssh as an option."""
        for name, pattern, what in (("user", SSH_USER, "letters, digits and '._-'"),
                                    ("host", SSH_HOST, "a hostname, IPv4 or IPv6 address")):
            if not isinstance(getattr(self, name), str) or not pattern.fullmatch(getattr(self, name)):
                raise ValueError(f"{name} must be {what}, not starting with '-', got {getattr(self, name)!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise ValueError(f"port must be an integer from 1 to 65535, got {self.port!r}")

    @classmethod
    def from_config(cls, config: BoardConfig, section: str = "board") -> Ssh:
        """Read ``host``, ``user``, ``port``, ``key``, ``connect_timeout_s``, ``ssh``, ``scp``
        and ``ssh_options`` from ``[section]``; :class:`BoardConfigError` names a bad one."""
        key = config.get(section, "key", "", str)
        if key and not Path(key).expanduser().is_file():
            raise BoardConfigError(f"{config.path}: [{section}] key: no such file {key!r} (the private key "
                                   f"that logs in to the board without a password)")
        try:
            return cls(host=config.get(section, "host", kind=str, what="the board's hostname or IP address"),
                       user=config.get(section, "user", kind=str, what="the user to log in as, e.g. root"),
                       port=config.count(section, "port", 22, 1), key=str(Path(key).expanduser()) if key else "",
                       connect_timeout_s=config.seconds(section, "connect_timeout_s", 10.0),
                       ssh=config.get(section, "ssh", "ssh", str), scp=config.get(section, "scp", "scp", str),
                       options=tuple(config.strings(section, "ssh_options")))
        except BoardConfigError:
            raise
        except ValueError as error:
            raise BoardConfigError(f"{config.path}: [{section}] {error}") from None

    def _common(self) -> list[str]:
        args = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(round(self.connect_timeout_s))}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                "-o", "StrictHostKeyChecking=accept-new"]
        if self.key:
            args += ["-i", self.key]
        for option in self.options:
            args += ["-o", option]
        return args

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}"

    def run(self, remote_command: str, timeout_s: float, what: str) -> Command:
        """``ssh`` running ``remote_command`` (a shell line on the board), killed locally
        after ``timeout_s``."""
        return Command((self.ssh, "-p", str(self.port), *self._common(), "--", self.target, remote_command),
                       timeout_s, what, "[board] ssh")

    def upload(self, local: Sequence[str | os.PathLike], remote_dir: str, timeout_s: float) -> Command:
        """``scp`` copying the ``local`` files into ``remote_dir`` on the board."""
        return Command((self.scp, "-P", str(self.port), *self._common(), "--", *map(str, local),
                        f"{self.target}:{remote_dir}/"), timeout_s, "copy to the board", "[board] scp")

    def download(self, remote: Sequence[str], local_dir: str | os.PathLike, timeout_s: float) -> Command:
        """``scp`` copying the ``remote`` files from the board into ``local_dir``."""
        return Command((self.scp, "-P", str(self.port), *self._common(), "--", *(f"{self.target}:{r}" for r in remote),
                        str(local_dir)), timeout_s, "copy from the board", "[board] scp")


SSH_CONNECTION_ERROR = 255     # ssh's own exit code: it could not connect or lost the connection
#: a login name ssh and scp take as one: no leading '-' (an option), no '@', ':' or spaces
SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
#: a hostname, an IPv4 address or an IPv6 address (bracketed or not, with a zone): no leading '-'
SSH_HOST = re.compile(r"[A-Za-z0-9_\[][A-Za-z0-9._:%\[\]-]{0,252}")

"""Is this machine quiet enough to measure on? Steal time and load before long work, the
canary's drift over it.

Three things spoil timings on a shared machine: a hypervisor that gives our virtual
CPU to another guest (*steal* time, the ``steal`` column of ``/proc/stat``), other
processes on our CPUs (the CPU time not idle while we wait, and the load average of
``/proc/loadavg``), and slow spells of the host that come and go (seen in the canary,
:mod:`.canary`). :func:`machine_state` samples ``/proc/stat`` twice ``interval_s`` apart;
:func:`between` compares two samples taken around a whole session. Where ``/proc`` is
missing (not Linux) the fields are ``None`` and nothing is warned.

The canary is read two ways. Before a session, the spread of its runs in one second
(``noise``) is reported but not warned on: over 127 recorded (session, set) rows it
exceeded 5 % before 96 % of them and told noisy sessions from quiet ones hardly at all
(Spearman +0.19 with the session's round-to-round difference; ``python
benchmarks/busy_check.py``). Over a session, the spread of its times between the items
(``drift``) tells how well the session's timings reproduced: sessions whose canary
drifted 0.6-0.9 % differed 2-4 % round to round, those that drifted 4 % or more 4.6-10 %
(Spearman +0.89 over 47 rows), so a drift above :data:`DRIFT_WARNING` warns once the
session is over.
"""
from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

#: warn when more than this share of CPU time was stolen by the hypervisor
STEAL_WARNING = 0.02
#: warn when the canary's times between a session's items spread more than this ((p90 - p10) / median)
DRIFT_WARNING = 0.02


class BusyMachineWarning(UserWarning):
    """The machine is too busy for reproducible timings (steal, load or the canary's drift)."""


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat``, in clock ticks: all time, idle time
    (idle + iowait) and stolen time."""

    total: int
    idle: int
    steal: int


def parse_proc_stat(text: str) -> CpuTimes:
    """The aggregate ``cpu`` line of a ``/proc/stat`` text (user nice system idle iowait irq
    softirq steal [guest guest_nice], guest time being counted in user and nice already);
    ``ValueError`` when there is none."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:9]] + [0] * max(0, 9 - len(fields))
            user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
            return CpuTimes(user + nice + system + idle + iowait + irq + softirq + steal, idle + iowait, steal)
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def read_cpu_times(path: str | os.PathLike = "/proc/stat") -> CpuTimes | None:
    """The machine's CPU times now (None where ``path`` cannot be read)."""
    with contextlib.suppress(OSError, ValueError):
        return parse_proc_stat(Path(path).read_text())
    return None


def load_average(path: str | os.PathLike = "/proc/loadavg") -> float | None:
    """The 1-minute load average (None where ``path`` cannot be read)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return float(Path(path).read_text().split()[0])
    return None


@dataclass(frozen=True)
class MachineState:
    """Steal share and busy share (CPU time not idle, all CPUs) over an interval, the
    1-minute load average, the machine's CPUs, the threads the measurement needs and how
    many of them the load average counts (0 while this process only waited), the spread
    of the canary's runs in the check (``noise``) and of its times over a session
    (``drift``; each None where not measured) and the warnings they call for."""

    steal_share: float | None
    busy_share: float | None
    load_1min: float | None
    cpus: int
    threads: int
    noise: float | None
    interval_s: float
    own_load: int = 0
    drift: float | None = None

    @property
    def warnings(self) -> list[str]:
        """Why this machine is too busy to measure on (empty when it is quiet)."""
        found = []
        if self.steal_share is not None and self.steal_share > STEAL_WARNING:
            found.append(f"the hypervisor stole {self.steal_share:.1%} of the CPU time (more than "
                         f"{STEAL_WARNING:.0%}): another guest shares these CPUs")
        if self.busy_share is not None and self.busy_share * self.cpus > self.cpus - self.threads + 0.5:
            found.append(f"other processes kept {self.busy_share * self.cpus:.1f} of {self.cpus} CPUs busy, "
                         f"leaving less than the {self.threads} thread(s) the measurement needs")
        elif self.load_1min is not None and self.load_1min - self.own_load > self.cpus - self.threads + 0.5:
            found.append(f"the load average is {self.load_1min:.2f} on {self.cpus} CPUs"
                         + (f" ({self.own_load} of it this measurement)" if self.own_load else "")
                         + f"; the measurement needs {self.threads} of them free")
        if self.drift is not None and self.drift > DRIFT_WARNING:
            found.append(f"the canary's time drifted {self.drift:.1%} over the session (more than "
                         f"{DRIFT_WARNING:.0%}): recorded sessions that drifted this much differed 4.6-10% round to "
                         f"round, those that drifted under 1% 2-4%")
        return found

    def __str__(self) -> str:
        parts = []
        if self.steal_share is not None:
            parts.append(f"steal {self.steal_share:.1%}")
        if self.busy_share is not None:
            parts.append(f"busy {self.busy_share * self.cpus:.1f} of {self.cpus} CPUs")
        if self.load_1min is not None:
            parts.append(f"load {self.load_1min:.2f} (1 min)")
        if self.noise is not None:
            parts.append(f"canary spread {self.noise:.1%}")
        if self.drift is not None:
            parts.append(f"canary drift {self.drift:.1%}")
        return ", ".join(parts) + f" over {self.interval_s:.0f} s" if parts else "no /proc to read"

    def warn(self) -> None:
        """Warn (:class:`BusyMachineWarning`) once with every reason this machine is too busy."""
        if self.warnings:
            warnings.warn("this machine is too busy for reproducible timings: " + "; ".join(self.warnings)
                          + ". Measure on a quieter machine or at a quieter time, or expect noisier numbers",
                          BusyMachineWarning, stacklevel=2)


def between(first: CpuTimes | None, second: CpuTimes | None, threads: int = 1, noise: float | None = None,
            interval_s: float = 0.0, measuring: bool = True,
            loadavg_path: str | os.PathLike = "/proc/loadavg", drift: float | None = None) -> MachineState:
    """The :class:`MachineState` over the interval between two CPU-time samples, with the
    canary's ``noise`` (its runs' spread in a check) or ``drift`` (its times' spread over a
    session) if measured; with ``measuring`` (a session ran in between) the busy share,
    which counts the session's own work, is left out and the load average is taken to
    include its threads."""
    steal = busy = None
    if first is not None and second is not None and second.total > first.total:
        elapsed = second.total - first.total
        steal = (second.steal - first.steal) / elapsed
        busy = None if measuring else 1.0 - (second.idle - first.idle) / elapsed
    return MachineState(steal, busy, load_average(loadavg_path), os.cpu_count() or 1, threads, noise, interval_s,
                        threads if measuring else 0, drift)


def machine_state(threads: int = 1, noise: float | None = None, interval_s: float = 1.0,
                  stat_path: str | os.PathLike = "/proc/stat",
                  loadavg_path: str | os.PathLike = "/proc/loadavg") -> MachineState:
    """Steal and busy share over the next ``interval_s`` seconds (this process sleeps
    meanwhile), the load average, and ``noise`` if the caller measured it."""
    first = read_cpu_times(stat_path)
    start = time.monotonic()
    time.sleep(interval_s)
    return between(first, read_cpu_times(stat_path), threads, noise, time.monotonic() - start, False, loadavg_path)

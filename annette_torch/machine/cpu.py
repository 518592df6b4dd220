"""The CPU identity: what decides which kernels a runtime picks on this CPU.

Two CPUs with the same marketing name ("AMD EPYC") can be different devices: a Zen 3
runs AVX2 kernels where a Zen 4 runs AVX-512 ones, and every layer's time moves. The
identity records what decides that, so that a profile, a measurement store and a
results file say which CPU they describe::

    {"vendor": "AuthenticAMD", "family": 25, "model": 17, "stepping": 1,
     "microarchitecture": "zen4", "isa": ["avx2", "avx512_bf16", "avx512_vnni", "avx512f"],
     "cores": 2, "l2_bytes": 1048576, "l3_bytes": 33554432}

``isa`` lists which of :data:`KERNEL_ISA` the CPU has. Vendor, ISA features and the
microarchitecture name come from archspec (the CPU detection Spack uses);
family/model/stepping from ``/proc/cpuinfo`` and the cache sizes from
``/sys/devices/system/cpu/cpu0/cache`` on Linux (``None`` where the OS does not say).
Under a hypervisor that hides the model, archspec names the generic level
(``x86_64_v4``); family/model/stepping still tell CPUs apart.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import os
from pathlib import Path
from typing import Any

#: ISA features that select a runtime's CPU kernels (oneDNN, MLAS, OpenBLAS): vector
#: width, bf16/int8 dot products and the AMX tile units.
KERNEL_ISA = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni",
              "amx_tile", "amx_bf16", "amx_int8")

#: Fields of :func:`cpu_id`, in the order differences are reported.
CPU_ID_FIELDS = ("vendor", "family", "model", "stepping", "microarchitecture", "isa",
                 "cores", "l2_bytes", "l3_bytes")

_CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")


def proc_cpuinfo() -> dict[str, str]:
    """The first processor's ``key: value`` lines of /proc/cpuinfo (empty elsewhere)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, colon, value = line.partition(":")
            if not colon:
                if fields:
                    break
                continue
            fields.setdefault(key.strip(), value.strip())
    return fields


def _int(text: str | None) -> int | None:
    with contextlib.suppress(TypeError, ValueError):
        return int(text)
    return None


def _cache_bytes(level: int) -> int | None:
    """Size of one unified/data cache of ``level`` seen by cpu0, from sysfs."""
    with contextlib.suppress(OSError):
        for index in sorted(_CACHE_ROOT.glob("index*")):
            if _int((index / "level").read_text().strip()) != level:
                continue
            if (index / "type").read_text().strip() not in ("Unified", "Data"):
                continue
            size = (index / "size").read_text().strip()
            units = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}
            return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    return None


@functools.cache
def _detect() -> dict[str, Any]:
    import archspec.cpu

    host = archspec.cpu.host()
    info = proc_cpuinfo()
    features = set(host.features) | set(info.get("flags", "").split())
    return {"vendor": host.vendor if host.vendor != "generic" else info.get("vendor_id"),
            "family": _int(info.get("cpu family")), "model": _int(info.get("model")),
            "stepping": _int(info.get("stepping")), "microarchitecture": host.name,
            "isa": sorted(f for f in KERNEL_ISA if f in features), "cores": os.cpu_count(),
            "l2_bytes": _cache_bytes(2), "l3_bytes": _cache_bytes(3)}


def cpu_id() -> dict[str, Any]:
    """This machine's CPU identity (see module doc); detected once per process."""
    return copy.deepcopy(_detect())


def cpu_id_differences(recorded: dict[str, Any], here: dict[str, Any] | None = None) -> list[str]:
    """Each field of :data:`CPU_ID_FIELDS` where ``recorded`` and ``here`` (default: this
    machine) differ, as ``"field recorded (this machine: here)"``; ISA as the features gained or missing."""
    here = cpu_id() if here is None else here
    differences = []
    for field in CPU_ID_FIELDS:
        then, now = recorded.get(field), here.get(field)
        if then == now:
            continue
        if field == "isa":
            missing, extra = sorted(set(then or ()) - set(now or ())), sorted(set(now or ()) - set(then or ()))
            parts = ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"adds {', '.join(extra)}"] if extra else [])
            differences.append(f"ISA: this CPU {' and '.join(parts)}")
        else:
            differences.append(f"{field} {then} (this machine: {now})")
    return differences

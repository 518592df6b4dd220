"""Zero-shot: a profile for a device nobody measured, from its descriptor.

A :class:`DeviceDescriptor` says what is known about a device from its data sheet:
runtime, precision, threads, clock, peak operations per second and memory bandwidth
(any of them may be unknown). :func:`profile_from_descriptor` takes the nearest source
device that has a profile (same runtime first, then same precision, then the closest
thread count; ties go to the earlier source) and adapts its profile with the
correction of :mod:`annette_torch.layer_models.adapted`: kernels the source's roofline
calls compute-bound take ``source peak / target peak`` times as long, memory-bound ones
``source bandwidth / target bandwidth`` times the ratio of bytes per element (a bf16
target moves half the bytes of an f32 source). A ratio whose numbers are unknown on
either side is 1. Both descriptors must be on the same footing (both data-sheet peaks,
not one fitted and one nominal): only their ratios are used.

What this cannot know: how a different runtime schedules the same network (a source of
another runtime is used unchanged) and how well a runtime uses more threads (peaks that
grow with the thread count, as in :data:`LOCAL_DESCRIPTORS`, promise a linear speed-up;
OpenVINO's second thread on this machine gains 1.4x on the benchmark networks, not 2x).
:data:`LOCAL_DESCRIPTORS` describes the device
configurations of this project's machine from facts, not from measurements: an AMD EPYC
(Zen 4, family 25 model 17, 2 cores, 1 thread per core) at its 2.6 GHz nominal clock,
32 f32 operations per cycle and core (two 256-bit FMA pipes) and 64 bf16 operations per
cycle and core (``avx512_bf16`` dot products at twice the f32 rate), and an assumed 32
bytes per cycle and core of cache bandwidth (the memory-bound kernels of batch-1
inference mostly run from the private L2 caches, so bandwidth is taken to grow with the
cores used).
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

from ..layer_models.adapted import Adaptation
from ..validation import number, read_json
from ..profiles import Profile, ProfileError, load_profile
from .fewshot import unadapted

BYTES_PER_ELEMENT = {"f32": 4, "fp32": 4, "bf16": 2, "f16": 2, "fp16": 2, "int8": 1}
#: the range a descriptor's numbers may take (a microcontroller to a data-centre accelerator
#: and then some): a value outside is a typo or a unit error, not a device
PLAUSIBLE = {"frequency_hz": (1e6, 1e11), "peak_ops_s": (1e6, 1e18), "memory_bandwidth_bytes_s": (1e6, 1e16)}
MAX_THREADS = 4096


@dataclass(frozen=True)
class DeviceDescriptor:
    """What is known about a device configuration; ``None`` where unknown.

    ``runtime``: the backend that runs the network (e.g. ``openvino-cpu``). ``precision``:
    arithmetic precision (``f32``, ``bf16``, ``f16``, ``int8``). ``threads``: threads (or
    cores) the runtime uses. ``frequency_hz``: clock. ``peak_ops_s``: peak operations per
    second for that precision and thread count (2 per multiply-accumulate).
    ``memory_bandwidth_bytes_s``: bandwidth memory-bound kernels see. ``device``: a
    name, for people."""

    runtime: str
    precision: str = "f32"
    threads: int | None = None
    frequency_hz: float | None = None
    peak_ops_s: float | None = None
    memory_bandwidth_bytes_s: float | None = None
    device: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.runtime, str) or not self.runtime:
            raise ValueError(f"descriptor field 'runtime': expected a backend name, got {self.runtime!r}")
        if not isinstance(self.device, str):
            raise ValueError(f"descriptor field 'device': expected a string, got {self.device!r}")
        if self.precision not in BYTES_PER_ELEMENT:
            raise ValueError(f"descriptor field 'precision': expected one of {', '.join(BYTES_PER_ELEMENT)}, "
                             f"got {self.precision!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or not 1 <= self.threads <= MAX_THREADS):
            raise ValueError(f"descriptor field 'threads': expected a positive integer up to {MAX_THREADS}, "
                             f"got {self.threads!r}")
        for name, (low, high) in PLAUSIBLE.items():
            if getattr(self, name) is not None:
                number(getattr(self, name), f"descriptor field {name!r} (a positive number or null)", low, high)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> DeviceDescriptor:
        """Build from JSON data; errors name the offending field."""
        if not isinstance(data, dict):
            raise ValueError(f"descriptor: expected a JSON object, got {data!r}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"descriptor field {unknown[0]!r}: unknown (known: "
                             f"{', '.join(f.name for f in dataclasses.fields(cls))})")
        if "runtime" not in data:
            raise ValueError("descriptor field 'runtime': missing")
        return cls(**data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> DeviceDescriptor:
        """Read a descriptor JSON file."""
        data = read_json(path, "descriptor")
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as error:
            raise ValueError(f"descriptor {path}: {error}") from None


def epyc_zen4(runtime: str, threads: int, precision: str = "f32") -> DeviceDescriptor:
    """This project's machine (see the module docstring) running ``runtime`` on ``threads``
    cores at ``precision``; numbers from the CPU's facts and stated assumptions."""
    frequency = 2.6e9
    ops_per_cycle = {"f32": 32, "bf16": 64}[precision]
    return DeviceDescriptor(runtime=runtime, precision=precision, threads=threads, frequency_hz=frequency,
                            peak_ops_s=threads * ops_per_cycle * frequency,
                            memory_bandwidth_bytes_s=threads * 32 * frequency, device="AMD EPYC (Zen 4)")


#: built-in profile (or device configuration) name -> its descriptor, this machine
LOCAL_DESCRIPTORS = {
    "openvino-cpu": epyc_zen4("openvino-cpu", 1),
    "openvino-cpu-2t": epyc_zen4("openvino-cpu", 2),
    "openvino-cpu-bf16": epyc_zen4("openvino-cpu", 1, "bf16"),
    "onnxruntime-cpu": epyc_zen4("onnxruntime-cpu", 1),
    "torch-cpu": epyc_zen4("torch-cpu", 1),
}


def nearest_source(target: DeviceDescriptor, sources: Sequence[DeviceDescriptor]) -> int:
    """Index of the source most like ``target``: same runtime, then same precision, then
    the closest thread count (ratio); the first on ties."""
    def distance(source: DeviceDescriptor) -> tuple:
        threads = (abs(math.log(source.threads / target.threads)) if source.threads and target.threads else 0.0)
        return (source.runtime != target.runtime, source.precision != target.precision, threads)
    return min(range(len(sources)), key=lambda i: distance(sources[i]))


def _ratio(source: float | None, target: float | None) -> float:
    return source / target if source and target else 1.0


def profile_from_descriptor(target: DeviceDescriptor, sources: Sequence[tuple[str | Profile, DeviceDescriptor]],
                            name: str | None = None) -> Profile:
    """A zero-shot profile for ``target`` from the nearest of ``sources`` ((profile,
    descriptor of its device) pairs): see the module docstring. The result records the
    source and both descriptors in its ``adaptation``; ``name`` defaults to
    ``<source>-to-<runtime>-<threads>t-<precision>``."""
    if not sources:
        raise ValueError("profile_from_descriptor needs at least one source (profile, descriptor)")
    index = nearest_source(target, [d for _, d in sources])
    profile, described = load_profile(sources[index][0]), sources[index][1]
    compute = _ratio(described.peak_ops_s, target.peak_ops_s)
    memory = (_ratio(described.memory_bandwidth_bytes_s, target.memory_bandwidth_bytes_s)
              * BYTES_PER_ELEMENT[target.precision] / BYTES_PER_ELEMENT[described.precision])
    unknown = [f for f in ("peak_ops_s", "memory_bandwidth_bytes_s")
               if getattr(target, f) is None or getattr(described, f) is None]
    adaptation = Adaptation(compute_scale=compute, memory_scale=memory, method="descriptor", source=profile.name,
                            terms=("split",), fit={"source_descriptor": described.to_dict(),
                                                   "target_descriptor": target.to_dict(),
                                                   "unknown_ratios_taken_as_1": unknown})
    base = unadapted(profile)
    same_runtime = target.runtime == described.runtime
    fingerprint = dict(base.fingerprint, backend=target.runtime, threads=target.threads, precision=target.precision,
                       device=target.device or base.fingerprint.get("device"),
                       runtime_version=base.fingerprint.get("runtime_version") if same_runtime else None)
    return dataclasses.replace(
        base, name=name or f"{profile.name}-to-{target.runtime}-{target.threads or 'n'}t-{target.precision}",
        fingerprint=fingerprint, adaptation=adaptation, source="",
        description=f"zero-shot from {profile.name} by device descriptor (compute x{compute:.3g}, "
                    f"memory x{memory:.3g})",
        notes=[*base.notes, f"zero-shot profile: {profile.name} with compute-bound kernels x{compute:.3g} and "
                            f"memory-bound kernels x{memory:.3g} (descriptor ratios; unknown taken as 1: "
                            f"{', '.join(unknown) or 'none'})"])


def local_sources(names: Sequence[str]) -> list[tuple[Profile, DeviceDescriptor]]:
    """(profile, descriptor) of each built-in profile name in ``names``; a ``ProfileError``
    names a profile without a known descriptor."""
    pairs = []
    for name in names:
        if name not in LOCAL_DESCRIPTORS:
            raise ProfileError(f"no device descriptor is known for profile {name!r}; descriptors are known for "
                               f"{', '.join(LOCAL_DESCRIPTORS)}")
        pairs.append((load_profile(name), LOCAL_DESCRIPTORS[name]))
    return pairs

"""Does a profile describe this machine? The check behind the estimator's warning.

A profile of a local runtime (OpenVINO CPU, ONNX Runtime CPU, PyTorch) records the CPU
it was calibrated on (model name and identity: vendor, family/model/stepping, the ISA
features that pick kernels, cores, caches; :mod:`annette_torch.machine`) and the runtime
version. Estimating with it on another CPU or runtime version still gives numbers, but
for that other machine; :func:`mismatch` says what differs and :func:`check_machine`
turns that into one :class:`ProfileMismatchWarning` per profile and process, with the
command that adapts the profile to this machine. Board profiles (ZCU102, NCS2) describe
a device that is not this machine, so they are not checked.
"""
from __future__ import annotations

import importlib.metadata
import re
import warnings

from ..machine import cpu_id_differences
from .profile import Profile

#: local backend -> the Python distribution whose version is its runtime version
LOCAL_RUNTIMES = {"openvino-cpu": "openvino", "onnxruntime-cpu": "onnxruntime",
                  "torch-cpu": "torch", "torch-cuda": "torch"}


class ProfileMismatchWarning(UserWarning):
    """The profile was calibrated on another CPU or runtime version than this machine's."""


def _release(version: str) -> str:
    """``2026.4.1`` of ``2026.4.1-22982-e213a147257-releases/2026/4`` or ``2.14.1+cu130``."""
    match = re.match(r"\d+(\.\d+)*", str(version))
    return match.group(0) if match else str(version)


def mismatch(profile: Profile) -> list[str]:
    """What differs between the machine ``profile`` was calibrated on and this one (empty
    when nothing does, or when the profile is not of a local runtime)."""
    from ..backends.base import cpu_model

    fingerprint = profile.fingerprint
    package = LOCAL_RUNTIMES.get(str(fingerprint.get("backend")))
    if package is None:
        return []
    differences = []
    calibrated_cpu = fingerprint.get("cpu") or fingerprint.get("device")
    if calibrated_cpu and calibrated_cpu != cpu_model():
        differences.append(f"CPU {calibrated_cpu!r}, this machine has {cpu_model()!r}")
    if isinstance(fingerprint.get("cpu_id"), dict):
        differences += [f"CPU {d}" for d in cpu_id_differences(fingerprint["cpu_id"])]
    else:
        differences.append(f"only the CPU's name {calibrated_cpu!r}, no identity (family/model/ISA), so it may "
                           f"describe another CPU of that name")
    try:
        here = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        here = None
    if here is None:
        differences.append(f"{package} {fingerprint.get('runtime_version')}, which is not installed here")
    elif _release(here) != _release(fingerprint.get("runtime_version", "")):
        differences.append(f"{package} {_release(fingerprint.get('runtime_version', ''))}, this machine has {here}")
    return differences


_warned: set[tuple[str, tuple[str, ...]]] = set()


def adapt_command(profile: Profile, source: str | None = None) -> str:
    """The ``annette-torch adapt`` command that fits ``profile`` to this machine;
    ``source``: how the command names the profile (default its name, as a built-in)."""
    fp = profile.fingerprint
    precision = f" --precision {fp['precision']}" if fp.get("precision") not in (None, "f32") else ""
    return (f"annette-torch adapt --from {source or profile.name} --backend {fp['backend']} "
            f"--threads {fp.get('threads', 1)}{precision} --samples 10 --out {profile.name}-here.json")


def is_local(profile: Profile) -> bool:
    """Whether ``profile`` is of a runtime that measures on this machine's CPU (the
    runtimes of :data:`LOCAL_RUNTIMES`)."""
    return str(profile.fingerprint.get("backend")) in LOCAL_RUNTIMES


def check_machine(profile: Profile) -> None:
    """Warn (:class:`ProfileMismatchWarning`, once per profile and difference per process)
    when ``profile`` is of a local runtime calibrated on another CPU or runtime version,
    naming what differs and the command that adapts it to this machine."""
    differences = mismatch(profile)
    key = (profile.name, tuple(differences))
    if not differences or key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"profile {profile.name!r} was calibrated on another machine: it records {'; '.join(differences)}. "
        f"Its estimates describe that machine. Adapt it to this one (about 2 minutes, 10 reference networks): "
        f"{adapt_command(profile)}, then Estimator('{profile.name}-here.json'). For the accuracy of a full "
        f"calibration: annette-torch calibrate --backend {profile.fingerprint['backend']} "
        f"--threads {profile.fingerprint.get('threads', 1)} --sweep full --out calib, then annette-torch fit "
        f"and the adapt command above on the fitted profile",
        ProfileMismatchWarning, stacklevel=3)

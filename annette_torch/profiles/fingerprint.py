"""Does a profile describe this machine? The check behind the estimator's warning.

A profile of a local runtime (OpenVINO CPU, ONNX Runtime CPU, PyTorch) records the CPU
model and runtime version it was calibrated with. Estimating with it on another CPU or
runtime version still gives numbers, but for that other machine; :func:`mismatch` says
what differs and :func:`check_machine` turns that into a :class:`ProfileMismatchWarning`
that says how to calibrate this machine. Board profiles (ZCU102, NCS2) describe a device
that is not this machine, so they are not checked.
"""
from __future__ import annotations

import importlib.metadata
import re
import warnings

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
    try:
        here = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        here = None
    if here is None:
        differences.append(f"{package} {fingerprint.get('runtime_version')}, which is not installed here")
    elif _release(here) != _release(fingerprint.get("runtime_version", "")):
        differences.append(f"{package} {_release(fingerprint.get('runtime_version', ''))}, this machine has {here}")
    return differences


def check_machine(profile: Profile) -> None:
    """Warn (:class:`ProfileMismatchWarning`) when ``profile`` is of a local runtime
    calibrated on another CPU or runtime version, saying how to calibrate this machine."""
    differences = mismatch(profile)
    if not differences:
        return
    fp = profile.fingerprint
    threads = fp.get("threads", 1)
    warnings.warn(
        f"profile {profile.name!r} was calibrated with {'; '.join(differences)}. Its estimates describe that "
        f"machine. To calibrate this one (the quick sweep takes about a minute per backend): "
        f"annette-torch calibrate --backend {fp['backend']} --threads {threads} --sweep quick --out calib "
        f"&& annette-torch fit --data calib/<the store folder it made> --out my-profiles, then "
        f"Estimator('my-profiles/<name>.json'); use --sweep full (about an hour) for the accuracy of the "
        f"shipped profiles", ProfileMismatchWarning, stacklevel=3)

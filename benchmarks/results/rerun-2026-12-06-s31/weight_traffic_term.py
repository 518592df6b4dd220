"""Session 31: ``benchmarks/accuracy.py`` with a weight-traffic term added to the openvino-cpu
profile's kernels (measures nothing; an experiment, not adopted). With ``w`` a kernel's
weight bytes, ``s`` its layer model's time and ``L2`` 1 MiB: in networks above the profile's
``weight_cache_bytes``, ``max(s + (WA * min(w, L2) + WB * max(w - L2, 0)) / bandwidth,
w / bandwidth)`` (WA = WB = 0: the shipped floor); in smaller networks
``s + WC * min(w, L2) / bandwidth``. ``WA``, ``WB``, ``WC`` come from the environment; the
arguments are accuracy.py's. Run by ``rescore-weight-traffic.sh``.
"""
import os
import runpy
import sys

import numpy as np

from annette_torch import estimator
from annette_torch.layer_models import weights_from_memory

A, B, C = (float(os.environ.get(name, "0")) for name in ("WA", "WB", "WC"))
L2 = 2 ** 20


def predict(self, features, xp=np):
    seconds, compute = self.inner.predict(features, xp)
    weight_bytes = features[:, weights_from_memory.COLUMN["weight_elems"]] * (self.bit_weights / 8.0)
    low, high = xp.minimum(weight_bytes, L2), xp.maximum(weight_bytes - L2, 0)
    if getattr(self, "cached", False):
        return seconds + C * low / self.bandwidth_bytes_s, compute
    floor = weight_bytes / self.bandwidth_bytes_s
    return xp.maximum(seconds + (A * low + B * high) / self.bandwidth_bytes_s, floor), compute & (seconds >= floor)


shipped_group_model = estimator.Estimator.group_model


def group_model(self, table, kind, rows, from_memory=None):
    if from_memory is None:
        from_memory = self.table_reads_weights_from_memory(table)
    model = shipped_group_model(self, table, kind, rows, from_memory)
    if not from_memory and C:
        model = weights_from_memory.WeightsFromMemory(model, self.profile.weight_bandwidth_bytes_s, self.weight_bits)
        model.cached = True
    return model


weights_from_memory.WeightsFromMemory.predict = predict
estimator.Estimator.group_model = group_model
sys.argv = ["accuracy.py"] + sys.argv[1:]
runpy.run_path("benchmarks/accuracy.py", run_name="__main__")

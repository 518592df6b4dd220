"""Session 39 probe (nothing shipped): torch-cpu gelu's mixed model fitted with fit_kind on the rows the
shipped fit takes (store_kernels: the 105 GELUs that read another kernel's output, times scaled by the fit's gap), with
the channel unrolling the search finds and without any, against the GELU-alone times of gelu-alone.txt (estimates
without the anchor). From the repository root:
    python benchmarks/results/rerun-2026-12-07-s39/gelu_unroll_probe.py > gelu-unroll-probe.txt
"""
import warnings; warnings.filterwarnings("ignore")
import numpy as np, torch.nn as nn
import annette_torch.fit.unroll as U
from annette_torch.fit.kinds import fit_kind
from annette_torch.fit.generate import _weights, _xy, store_kernels
from annette_torch.fit.fused import is_plain
from annette_torch import trace
gap, kernels = store_kernels("calibration/data/torch-cpu-1t-f32-2.14.1+cu130-c13e1653")
group = kernels[(kernels.kind == "gelu") & is_plain(kernels)]
F, sec = _xy(group, gap); w = _weights(group)
print(len(group), "rows; gap-scaled/raw median", np.median(sec * 1e3 / group.time_ms.to_numpy()).round(3))
shapes = [(1,208,256),(1,784,256),(1,3136,256),(1,56,56,384),(1,28,28,768),(1,14,14,1536),(1,7,7,3072),(1,384,56,56)]
Q = np.vstack([trace(nn.GELU().eval(), input_shape=s).features for s in shapes])
alone = [50.8, 105.6, 385.4, 661.3, 306.9, 154.1, 83.0, 660.3]
big = group.output_elems.to_numpy() > 2e5
for label, gain in (("unroll as fitted", U.MIN_GAIN), ("no unroll", np.inf)):
    U.MIN_GAIN = gain
    fit = fit_kind(F, sec, w)
    m = fit.models["mixed"]
    inner = m.predict(F)[0] / sec
    print(f"{label:18s} unroll={m.roofline.unroll} learner={m.learner} in-sample median ratio (>0.2M elems, {big.sum()} rows) {np.median(inner[big]):.2f}")
    print("   ", "  ".join(f"{'x'.join(map(str, s[1:]))}: {t * 1e6:.0f}/{a:.0f}" for s, t, a in zip(shapes, m.predict(Q)[0], alone)))

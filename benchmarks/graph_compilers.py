"""What OpenVINO and ONNX Runtime remove from small networks: their compiled graphs, side by
side with what the estimator frees (a benchmark: prints tables, asserts nothing, times nothing).

    python benchmarks/graph_compilers.py [--probes catslice_whole,catslice_part,...] [--ghostnet]

Each probe is exported as the backends export (TorchScript ONNX export), then compiled:
OpenVINO (CPU, 1 thread): the runtime model's ops, ``layerType/primitiveType`` (``unknown``:
run in place) with the original layers they hold; ONNX Runtime (``ORT_ENABLE_ALL``): the op
types of its optimized graph. Beside them, the layers ``openvino-cpu`` and
``onnxruntime-cpu`` cost as free. The findings are in docs/graph-compilers.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from annette_torch import Estimator, trace  # noqa: E402
from annette_torch.backends import get_backend  # noqa: E402
from annette_torch.backends.base import export_onnx  # noqa: E402

SHAPE = (1, 16, 16, 16)
_HIDDEN = {"Input", "Output", "Const", "Parameter", "Result"}


class CatSlice(nn.Module):
    """GhostNet's module tail: ``cat([a, b], 1)[:, :keep]`` into a conv."""

    def __init__(self, keep: int) -> None:
        super().__init__()
        self.keep = keep
        self.a, self.b = nn.Conv2d(16, 12, 1), nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.out = nn.Conv2d(keep, 16, 1)

    def forward(self, x):
        a = torch.relu(self.a(x))
        return self.out(torch.cat([a, torch.relu(self.b(a))], 1)[:, :self.keep])


class Split(nn.Module):
    """A conv's channels split between two convs."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(16, 32, 1), nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 1)

    def forward(self, x):
        y = self.a(x)
        return self.b(y[:, :16]) + self.c(y[:, 16:])


class SplitConvs(nn.Module):
    """MixNet's grouped pointwise conv: the channels split in two, a 1x1 conv on each half,
    the halves concatenated (``bias``: convs with biases)."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(8, 12, 1, bias=bias), nn.Conv2d(8, 12, 1, bias=bias)

    def forward(self, x):
        parts = torch.split(x, 8, 1)
        return torch.relu(torch.cat([self.a(parts[0]), self.b(parts[1])], 1))


class Layout(nn.Module):
    """A layout change between two layers: ``shuffle`` (view-transpose-view), ``tokens``
    (flatten(2).transpose(1, 2) into a linear), ``permute`` (NCHW -> NHWC and back)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.a, self.c, self.lin = nn.Conv2d(16, 32, 1), nn.Conv2d(32, 32, 1), nn.Linear(32, 32)

    def forward(self, x):
        y = self.a(x)
        if self.how == "shuffle":
            n, c, h, w = y.shape
            return self.c(y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w))
        if self.how == "tokens":
            return self.lin(y.flatten(2).transpose(1, 2))
        return self.lin(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Arithmetic(nn.Module):
    """``sum`` of two convs (``0 + a + b``), then ``* 1.0``, ``/ 1`` and ``* 0``."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 1)

    def forward(self, x):
        y = sum([self.a(x), self.b(x)])
        return torch.sigmoid(y * 1.0 / 1) + y.mul(0.0)


class ParameterOnly(nn.Module):
    """LeViT's attention biases and ConViT's position projection: a gather of a parameter by
    a buffer of indices, and a linear with a softmax on a buffer, added to a conv's output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 1)
        self.biases = nn.Parameter(torch.randn(16, 64))
        self.register_buffer("index", torch.randint(0, 64, (16, 16)), persistent=False)
        self.register_buffer("position", torch.randn(16, 16, 3), persistent=False)
        self.proj = nn.Linear(3, 16)

    def forward(self, x):
        gathered = self.biases[:, self.index]                         # (16, 16, 16)
        projected = self.proj(self.position).softmax(-1).permute(2, 0, 1)
        return self.conv(x) + gathered + projected


PROBES = {"catslice_whole": lambda: CatSlice(24), "catslice_part": lambda: CatSlice(20), "split": Split,
          "shuffle": lambda: Layout("shuffle"), "tokens": lambda: Layout("tokens"),
          "permute": lambda: Layout("permute"), "arithmetic": Arithmetic, "parameter_only": ParameterOnly,
          "split_convs": lambda: SplitConvs(False), "split_convs_bias": lambda: SplitConvs(True)}


def openvino_ops(path: Path) -> list[str]:
    """``layerType/primitiveType [original layers]`` of each op of OpenVINO's runtime model."""
    compiled = get_backend("openvino-cpu", threads=1).compile_onnx(path)
    lines = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        kind = info["layerType"].astype(str)
        if kind not in _HIDDEN:
            lines.append(f"{kind}/{info['primitiveType'].astype(str)} [{info['originalLayersNames'].astype(str)}]")
    return lines


def onnxruntime_ops(path: Path, folder: str) -> list[str]:
    """Op types of ONNX Runtime's optimized graph of ``path``."""
    import onnx
    import onnxruntime as ort

    options = get_backend("onnxruntime-cpu", threads=1).session_options()
    options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]


def show(name: str, model: nn.Module, shape: tuple[int, ...], brief: bool) -> None:
    """Print the compiled graphs of ``model`` and the layers each CPU profile frees."""
    model.eval()
    with tempfile.TemporaryDirectory(prefix="annette_graphs_") as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export_onnx(model, shape, Path(folder) / "model.onnx")
        ov, ort_ops = openvino_ops(path), onnxruntime_ops(path, folder)
        graph = trace(model, input_shape=shape, name=name)
        reports = {p: Estimator(p).report(graph) for p in ("openvino-cpu", "onnxruntime-cpu")}
    free = {p: [f"{r.kind}:{r.layers}" for r in report.itertuples() if r.confidence == "free"]
            for p, report in reports.items()}
    print(f"\n== {name}")
    if brief:
        kinds = sorted({line.split(" ")[0] for line in ov})
        print(f"OpenVINO runtime model: {len(ov)} ops of {', '.join(kinds)}")
        print(f"ONNX Runtime optimized graph: {len(ort_ops)} ops, "
              f"{', '.join(f'{t} x{ort_ops.count(t)}' for t in sorted(set(ort_ops)))}")
    else:
        print("OpenVINO runtime model:\n  " + "\n  ".join(ov))
        print(f"ONNX Runtime optimized graph: {' '.join(ort_ops)}")
    for profile, layers in free.items():
        print(f"free on {profile}: {len(layers)} kernel(s)" + (f": {', '.join(layers)}" if layers and not brief else ""))
        if not brief:
            print(f"kernels on {profile}: " + ", ".join(f"{r.kind}:{r.layers}" for r in reports[profile].itertuples()
                                                          if r.confidence != "free"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", default=",".join(PROBES), help=f"comma-separated, of {', '.join(PROBES)}")
    parser.add_argument("--ghostnet", action="store_true", help="also timm's ghostnet_100 at 1x3x224x224 (summary)")
    args = parser.parse_args()
    unknown = [p for p in args.probes.split(",") if p and p not in PROBES]
    if unknown:
        raise SystemExit(f"unknown probe(s) {', '.join(unknown)}; probes are {', '.join(PROBES)}")
    for name in filter(None, args.probes.split(",")):
        show(name, PROBES[name](), SHAPE, brief=False)
    if args.ghostnet:
        import timm
        show("ghostnet_100", timm.create_model("ghostnet_100", pretrained=False), (1, 3, 224, 224), brief=True)


if __name__ == "__main__":
    main()

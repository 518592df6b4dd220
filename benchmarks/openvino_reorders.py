"""The layout reorders OpenVINO adds inside timm networks: the runtime ``Reorder`` nodes
that compute no layer of the export, by what they connect.

    python benchmarks/openvino_reorders.py mambaout_femto convnext_atto [--runs 10]

Exports each network as the backends do (224x224 or the model's own input size), compiles
it through the ``openvino-cpu`` backend (1 thread, performance counters on), runs it
``--runs`` times and prints, per (producer type -> consumer types, output layout, output
shape), how many such reorders there are and their median time summed (a benchmark: a
table, timed with the profiler, not end to end). The estimator has no kernel for them
(the network-output reorders aside); ``calibrate --for`` reports them as "kernels tied to
no layer".
"""
from __future__ import annotations

import argparse
import collections
import tempfile
import warnings
from pathlib import Path

import numpy as np


def reorders(name: str, runs: int) -> tuple[float, dict[tuple[str, str, str, str], list[float]]]:
    """(the profiled kernels' summed median ms, pattern -> median ms of each of its reorders)."""
    import timm

    from annette_torch.backends import get_backend
    from annette_torch.backends.base import export_onnx, random_inputs
    from annette_torch.models_source import timm_input_shape

    backend = get_backend("openvino-cpu", threads=1)
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = timm.create_model(name).eval()
        shape = timm_input_shape(model)
        path = export_onnx(model, shape, Path(folder) / "model.onnx")
        compiled = backend.compile_onnx(path, perf_count=True)
    request = compiled.create_infer_request()
    x = random_inputs(shape)[0]
    times: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(runs):
        request.infer({0: x})
        for entry in request.get_profiling_info():
            times[entry.node_name].append(entry.real_time.total_seconds() * 1e3)
    total = sum(float(np.median(t)) for t in times.values())
    found: dict[tuple[str, str, str, str], list[float]] = collections.defaultdict(list)
    layer_type = lambda node: node.get_rt_info()["layerType"].astype(str)  # noqa: E731
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if layer_type(op) != "Reorder" or info["originalLayersNames"].astype(str):
            continue
        consumers = sorted({layer_type(i.get_node()) for out in op.outputs() for i in out.get_target_inputs()})
        layout = info["outputLayouts"].astype(str) if "outputLayouts" in info else ""
        key = (layer_type(op.input_value(0).get_node()), ",".join(consumers), layout, str(op.get_output_partial_shape(0)))
        found[key].append(float(np.median(times.get(op.get_friendly_name(), [0.0]))))
    return total, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="timm model names")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    for name in args.models:
        total, found = reorders(name, args.runs)
        spent = sum(sum(t) for t in found.values())
        print(f"{name}: profiled kernels {total:.3f} ms, of which {spent:.3f} ms in {sum(map(len, found.values()))} "
              f"reorders that compute no layer")
        print(f"  {'producer -> consumers':<40}{'layout':>8}  {'shape':<22}{'count':>6}{'ms':>9}")
        for (producer, consumers, layout, shape), ms in sorted(found.items(), key=lambda item: -sum(item[1])):
            print(f"  {producer + ' -> ' + consumers:<40}{layout:>8}  {shape:<22}{len(ms):>6}{sum(ms):>9.3f}")


if __name__ == "__main__":
    main()

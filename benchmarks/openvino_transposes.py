"""What OpenVINO runs for each ONNX Transpose of timm networks, by pattern.

    python benchmarks/openvino_transposes.py pvt_v2_b0 convnext_atto mambaout_femto [--all]

Exports each network as the backends do, compiles it on OpenVINO's CPU plugin (1 thread,
performance counters on), runs 3 inferences, and for every ``Transpose`` of the export
prints its permutation, the op producing its input and the ops reading its output (seen
through reshapes, flattens, squeezes) and what the runtime did with it: the runtime nodes
holding it (``originalLayersNames``) with their type and status, or ABSENT when no runtime
node holds it. Counts per (network, pattern, outcome); ``--all`` lists every transpose.
The evidence for ``LayerGraph.layout_transposes`` (docs/graph-compilers.md). Times nothing.
"""
from __future__ import annotations

import argparse
import collections
import tempfile
import warnings

import numpy as np

#: ONNX ops seen through when looking for a transpose's neighbours
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


def transposes(name: str) -> list[tuple[str, str, str, str]]:
    """(permutation, producer op, consumer ops, outcome) of each Transpose of timm's ``name``."""
    import onnx
    import openvino as ov
    import timm

    from annette_torch.backends.base import export_onnx

    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = f"{folder}/model.onnx"
        export_onnx(timm.create_model(name).eval(), (1, 3, 224, 224), path)
        graph = onnx.load(path).graph
        compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": 1, "PERF_COUNT": True})
    request = compiled.create_infer_request()
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    for _ in range(3):
        request.infer({0: x})
    status = {e.node_name: f"{e.node_type}:{str(e.status).split('.')[-1]}" for e in request.get_profiling_info()}
    owners = collections.defaultdict(list)
    for op in compiled.get_runtime_model().get_ordered_ops():
        for original in filter(None, op.get_rt_info()["originalLayersNames"].astype(str).split(",")):
            owners[original].append(op.get_friendly_name())
    producer = {out: node for node in graph.node for out in node.output}
    consumers = collections.defaultdict(list)
    for node in graph.node:
        for tensor in node.input:
            consumers[tensor].append(node)

    def up(tensor: str) -> str:
        node = producer.get(tensor)
        while node is not None and node.op_type in VIEWS:
            node = producer.get(node.input[0])
        return node.op_type if node is not None else "input"

    def down(tensor: str) -> list[str]:
        found = []
        for node in consumers.get(tensor, []):
            found += down(node.output[0]) if node.op_type in VIEWS else [node.op_type]
        return found or ["output"]

    rows = []
    for node in graph.node:
        if node.op_type == "Transpose":
            perm = next(list(a.ints) for a in node.attribute if a.name == "perm")
            held = sorted({status[r] for r in owners.get(node.name, []) if r in status})
            rows.append((str(perm), up(node.input[0]), ",".join(down(node.output[0])), " ".join(held) or "ABSENT"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("networks", nargs="+", help="timm model names")
    parser.add_argument("--all", action="store_true", help="list every transpose, not counts")
    args = parser.parse_args()
    for name in args.networks:
        rows = transposes(name)
        print(f"{name}: {len(rows)} transposes")
        counted = ([(1, row) for row in rows] if args.all
                   else [(n, row) for row, n in collections.Counter(rows).most_common()])
        for count, (perm, source, readers, outcome) in counted:
            print(f"  {count:4d}  {perm:<18} {source:>20} -> {readers:<28} {outcome}")


if __name__ == "__main__":
    main()

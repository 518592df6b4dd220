"""Time a compiled xmodel on a Zynq UltraScale+ DPU; runs on the board with the board's
Python (VART and XIR bindings of the Vitis AI runtime), never imported by annette_torch.

    python3 zcu102_runner.py MODEL.xmodel --warmup 5 --repeats 25 --out result.json

The xmodel's child subgraphs are taken in topological order (``toposort_child_subgraph``);
each one whose ``device`` attribute is ``DPU`` gets its own runner
(``vart.Runner.create_runner(subgraph, "run")``). One inference runs the DPU subgraphs
one after the other (``execute_async`` then ``wait``), each timed with
``time.perf_counter``; after ``warmup`` untimed inferences, ``repeats`` timed ones give
per-subgraph times and, as a separate loop of the same chain, end-to-end times.

``result.json``: ``{"format": "annette-zcu102-runner", "version": 1, "xmodel", "warmup",
"repeats", "subgraphs": [{"name", "device", "ops": [{"name", "type"}], "children":
[{"name", "ops"}], "runs_ms": [...]}], "end_to_end_ms": [...]}``; subgraphs of other
devices (USER, CPU) are listed with their ops and no times. ``children`` are the
subgraph's own child subgraphs (per-layer subgraphs of models compiled for
fine-grained profiling), named as vaitrace names them. Exit codes: 0 done, 2 usage,
3 the model has no DPU subgraph, 1 anything else.
"""
import argparse
import json
import sys
import time


def _ops(subgraph):
    ops = subgraph.toposort() if hasattr(subgraph, "toposort") else list(subgraph.get_ops())
    return [{"name": op.get_name(), "type": op.get_type()} for op in ops]


def _device(subgraph):
    return subgraph.get_attr("device").upper() if subgraph.has_attr("device") else ""


def _children(subgraph):
    leaf = getattr(subgraph, "is_leaf", True)
    if (leaf() if callable(leaf) else leaf) or not hasattr(subgraph, "toposort_child_subgraph"):
        return []
    return [{"name": child.get_name(), "ops": _ops(child)} for child in subgraph.toposort_child_subgraph()]


def _buffers(tensors, numpy):
    buffers = []
    for tensor in tensors:
        kind = str(getattr(tensor, "dtype", "xint8")).lower()
        dtype = numpy.float32 if "float" in kind else numpy.int8
        buffers.append(numpy.zeros(tuple(tensor.dims), dtype=dtype, order="C"))
    return buffers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xmodel")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import numpy
    import vart
    import xir

    graph = xir.Graph.deserialize(args.xmodel)
    subgraphs = graph.get_root_subgraph().toposort_child_subgraph()
    report = {"format": "annette-zcu102-runner", "version": 1, "xmodel": args.xmodel, "warmup": args.warmup,
              "repeats": args.repeats, "subgraphs": [], "end_to_end_ms": []}
    chain = []
    for subgraph in subgraphs:
        entry = {"name": subgraph.get_name(), "device": _device(subgraph), "ops": _ops(subgraph),
                 "children": _children(subgraph), "runs_ms": []}
        report["subgraphs"].append(entry)
        if entry["device"] == "DPU":
            runner = vart.Runner.create_runner(subgraph, "run")
            inputs = _buffers(runner.get_input_tensors(), numpy)
            outputs = _buffers(runner.get_output_tensors(), numpy)
            chain.append((entry, runner, inputs, outputs))
    if not chain:
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=1)
        print("no DPU subgraph in %s" % args.xmodel, file=sys.stderr)
        return 3

    def infer(record):
        for entry, runner, inputs, outputs in chain:
            start = time.perf_counter()
            runner.wait(runner.execute_async(inputs, outputs))
            if record:
                entry["runs_ms"].append((time.perf_counter() - start) * 1e3)

    for _ in range(args.warmup):
        infer(False)
    for _ in range(args.repeats):
        infer(True)
    for _ in range(args.repeats):
        start = time.perf_counter()
        infer(False)
        report["end_to_end_ms"].append((time.perf_counter() - start) * 1e3)
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

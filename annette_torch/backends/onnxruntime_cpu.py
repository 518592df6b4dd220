"""``onnxruntime-cpu``: ONNX Runtime's CPU execution provider, sequential execution.

Per-layer profiles come from ORT's profiler (one ``<node>_kernel_time`` event per node
and run, grouped into runs by the ``model_run`` events) and from the optimized graph ORT
writes next to it, which says what it fused: a node of the optimized graph computes the
original node it is named after (``/conv/Conv``, ``/fc/MatMul/MatMulAddFusion``, or
``<tensor>_nchwc`` for the NCHWc layout's convolutions) together with the vanished original nodes behind the tensors it
produces (a ReLU fused into ``FusedConv``), found by walking back over original nodes
no earlier kernel has claimed, up to and including the first conv or matmul (an
activation before a conv is never fused into it). An NCHWc conv named after its conv's
output also computes, forward from there, the residual Add it sums its fourth input
into and the activation its ``activation`` attribute names (a ResNet block's add and
ReLU, a MobileNetV3 conv's hard swish). Layout reorders claim nothing. A new node that
is neither (a part of a decomposed op) counts for the original node whose output it
leads to.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import onnx
    import onnxruntime as ort

from .base import KernelRecord, OnnxBackend, input_list, register_backend

_NCHWC_SUFFIX = "_nchwc"
_NCHWC_DOMAIN = "com.microsoft.nchwc"
_LAYOUT_OPS = frozenset({"ReorderInput", "ReorderOutput"})
_COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
_DECOMPOSITION_DEPTH = 3


@register_backend
class OnnxRuntimeCpu(OnnxBackend):
    """ONNX Runtime on ``CPUExecutionProvider`` with ``intra_op_num_threads`` = ``threads``,
    ``inter_op_num_threads`` = 1, sequential execution and all graph optimizations."""

    name = "onnxruntime-cpu"

    def runtime_version(self) -> str:
        import onnxruntime as ort  # imported on use: importing annette_torch loads no runtime

        return ort.__version__

    def session_options(self) -> ort.SessionOptions:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3        # no warning about saving an NCHWc-optimized model
        return options

    def compile_onnx(self, path: str | os.PathLike) -> ort.InferenceSession:
        import onnxruntime as ort

        return ort.InferenceSession(str(path), self.session_options(), providers=["CPUExecutionProvider"])

    def runner(self, compiled: ort.InferenceSession, x: np.ndarray | Sequence[np.ndarray]) -> Callable[[], object]:
        feed = {entry.name: array for entry, array in zip(compiled.get_inputs(), input_list(x))}
        return lambda: compiled.run(None, feed)

    def profile_onnx(self, path: Path, x: np.ndarray | Sequence[np.ndarray], warmup: int,
                     repeats: int) -> list[KernelRecord]:
        import onnx
        import onnxruntime as ort

        with tempfile.TemporaryDirectory(prefix="annette_ort_") as folder:
            options = self.session_options()
            options.enable_profiling = True
            options.profile_file_prefix = str(Path(folder) / "profile")
            options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            run = self.runner(session, x)
            for _ in range(warmup + repeats):
                run()
            events = json.loads(Path(session.end_profiling()).read_text())
            optimized = onnx.load(options.optimized_model_filepath).graph
        original = onnx.load(str(path), load_external_data=False).graph
        originals = fused_originals(original, optimized)
        times = _node_times(events, repeats)
        # ORT's profiler names an unnamed node "<OpType>_<index>"; pair those, per op
        # type and in order, with the unnamed nodes of the optimized graph
        unnamed = {}
        for position, node in enumerate(optimized.node):
            if not node.name:
                unnamed.setdefault(node.op_type, []).append(_unnamed_key(position))
        keys = {name: name if name in originals else (unnamed.get(op) or [name]).pop(0)
                for name, (op, _, _) in times.items()}
        return [KernelRecord(name=name, kernel_type=op, exec_type=provider, status="EXECUTED",
                             runs_ms=tuple(runs), layers=originals.get(keys[name], ()))
                for name, (op, provider, runs) in times.items()]


def _node_times(events: list[dict], repeats: int) -> dict[str, tuple[str, str, list[float]]]:
    """Per node of the last ``repeats`` runs: (op type, provider, time in ms per run)."""
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(runs) < repeats:
        raise RuntimeError(f"ONNX Runtime's profile holds {len(runs)} runs, expected at least {repeats}")
    runs = runs[-repeats:]
    times: dict[str, tuple[str, str, list[float]]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        if not any(start <= event["ts"] <= end for start, end in runs):
            continue
        args = event.get("args", {})
        entry = times.setdefault(name[: -len("_kernel_time")], (args.get("op_name", ""), args.get("provider", ""), []))
        entry[2].append(event["dur"] / 1e3)
    return times


def fused_originals(original: onnx.GraphProto, optimized: onnx.GraphProto) -> dict[str, tuple[str, ...]]:
    """For each node of ``optimized`` (in its order; an unnamed one keyed ``#<position>``),
    the names of the ``original`` nodes it computes: see the module docstring."""
    producer = {output: node for node in original.node for output in node.output}
    original_names = {node.name for node in original.node}
    surviving = {node.name for node in optimized.node}
    consumers: dict[str, list[onnx.NodeProto]] = {}     # optimized graph: tensor -> nodes reading it
    for node in optimized.node:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node)
    original_consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in original.node:
        for tensor in node.input:
            original_consumers.setdefault(tensor, []).append(node)
    claimed: set[str] = set()
    result = {}
    for position, node in enumerate(optimized.node):
        names = []
        own = node.name                        # "/fc/MatMul/MatMulAddFusion" is named after "/fc/MatMul"
        while own and own not in original_names:
            own = own.rpartition("/")[0]
        if own and own not in claimed:
            names.append(own)
            claimed.add(own)
        anchors = [output for output in node.output if output in producer]
        named = node.name[: -len(_NCHWC_SUFFIX)] if node.name.endswith(_NCHWC_SUFFIX) else ""   # an NCHWc conv's tensor
        if named and named in producer:
            anchors.append(named)
        key = node.name or _unnamed_key(position)
        if node.op_type in _LAYOUT_OPS:        # layout changes compute no original node
            result[key] = tuple(names)
            continue
        stack = [producer[t] for t in anchors]
        while stack:
            candidate = stack.pop()
            if candidate.name in claimed or candidate.name in surviving:
                continue
            claimed.add(candidate.name)
            names.append(candidate.name)
            if candidate.op_type not in _COMPUTE_OPS:   # post-ops lead back to their conv / gemm, not past it
                stack.extend(producer[t] for t in candidate.input if t in producer)
        for later in _nchwc_post_ops(node, named, producer, surviving, original_consumers):
            if later.name not in claimed:
                claimed.add(later.name)
                names.append(later.name)
        if not names:
            names = list(_decomposed_from(node, consumers, producer))
        result[key] = tuple(names)
    return result


def _nchwc_post_ops(node: onnx.NodeProto, anchor: str, producer: dict, surviving: set[str],
                    original_consumers: dict[str, list[onnx.NodeProto]]) -> list[onnx.NodeProto]:
    """The original nodes after its conv that an NCHWc conv named after the conv's output
    (``anchor``) computes: the Add it sums its fourth input into, then the activation its
    attribute names (a ResNet block's residual add and ReLU; a conv's hard swish), each
    the only reader of what came before it and gone from the optimized graph."""
    if node.domain != _NCHWC_DOMAIN or node.op_type != "Conv" or getattr(producer.get(anchor), "op_type", "") != "Conv":
        return []
    wanted = ["Add"] if len(node.input) > 3 and node.input[3] else []
    wanted += [a.s.decode() for a in node.attribute if a.name == "activation"]
    found, tensors = [], [anchor]
    for op_type in wanted:
        readers = [n for t in tensors for n in original_consumers.get(t, ())]
        if len(readers) != 1 or readers[0].op_type != op_type or readers[0].name in surviving:
            break
        found.append(readers[0])
        tensors = list(readers[0].output)
    return found


def _unnamed_key(position: int) -> str:
    return f"#{position}"


def _decomposed_from(node: onnx.NodeProto, consumers: dict[str, list[onnx.NodeProto]],
                     producer: dict) -> tuple[str, ...]:
    """The original node a new node of the optimized graph is part of: the producer of
    the first original tensor found downstream (ORT decomposing HardSwish into
    HardSigmoid and Mul, which write the HardSwish's output). Shared, not claimed: every
    part of a decomposition counts for the original node."""
    frontier, seen = list(node.output), set()
    for _ in range(_DECOMPOSITION_DEPTH):
        found = [producer[t].name for t in frontier if t in producer]
        if found:
            return tuple(dict.fromkeys(found))
        seen.update(frontier)
        frontier = [out for t in frontier for n in consumers.get(t, ()) for out in n.output if out not in seen]
    return ()

"""The training data of the model generator: benchmark graphs and the kernel table.

A measurement store (:mod:`annette_torch.calibration.store`) records, per benchmark
layer, whether the target executed it, fused it into another layer or optimized it out,
and the executed layers' times. Here each ok benchmark's network is rebuilt from its spec
and traced, so the estimator's own feature counting and mapping model see exactly the
graphs that were measured; then :func:`kernel_table` maps each graph with a rule set and
joins every kernel with its measured time.

A kernel's measured time is the sum of its layers' ``time_ms`` (the executed primary
layer carries the time of the layers fused into it); a product layer (conv, matmul,
attention, ...) whose runtime kernels only move data (:data:`MOVEMENT_KERNELS`) is not
measured: its products ran in a kernel the runtime named after another layer (OpenVINO's
causal-attention Subgraph, named after the query's transpose, left the attention layer
0.09 ms of a 4 ms kernel). ``agrees`` says whether the rules
grouped the layers as the target did: the kernel's layers are exactly the executed
primary and the layers the target fused into it. Only agreeing, measured kernels are
fitted on; a kernel whose layers the target optimized out has no time of its own.
"""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..calibration.generator import build_benchmark
from ..calibration.matcher import MOVEMENT_KERNELS
from ..calibration.sweep import BenchmarkSpec
from ..graph import LayerGraph, trace
from ..kinds import FEATURES, PRODUCT_KINDS
from ..mapping import OUTPUT_REORDER, Counting, FusionRule, map_kernels
from .overhead import Gap, scaled_kernel_sums


@dataclass(frozen=True)
class StoreData:
    """One store, ready to fit: its fingerprint, ok benchmarks, layer rows and graphs."""

    fingerprint: dict
    networks: pd.DataFrame          # ok benchmarks only, indexed by benchmark id
    layers: pd.DataFrame            # layer rows of those benchmarks (runtime kernels included)
    graphs: dict[str, LayerGraph]   # benchmark id -> traced network


def load_store(folder, first: int | None = None, sample: int | None = None, seed: int = 0,
               progress: bool = False) -> StoreData:
    """Read a store folder (its ``first`` committed benchmarks, or all; then, with
    ``sample``, that many of them drawn at random with ``seed``) and trace every ok
    benchmark's network from its spec."""
    from ..calibration import load_measurements

    fingerprint, networks, layers = load_measurements(folder)
    networks = networks if first is None else networks.head(first)
    if sample is not None and sample < len(networks):
        networks = networks.sample(n=sample, random_state=seed).sort_index()
    ok = networks[networks["status"] == "ok"].set_index("benchmark", drop=False)
    graphs = {}
    items = ok["spec"].items()
    if progress:
        from tqdm import tqdm
        items = tqdm(items, total=len(ok), desc="tracing benchmarks", unit="net")
    for benchmark, spec in items:
        module, input_shape = build_benchmark(_checked_spec(folder, benchmark, spec))
        graphs[benchmark] = trace(module, input_shape=input_shape, name=benchmark)
    layers = layers[layers["benchmark"].isin(graphs)].reset_index(drop=True)
    return StoreData(fingerprint, ok, layers, graphs)


#: the largest benchmark a store may ask to rebuild (operations, activation elements):
#: far above any sweep's limits, far below what would exhaust the memory of a fit
STORE_MAX_OPS, STORE_MAX_ELEMS = 1e13, 1e9


def _checked_spec(folder, benchmark: str, text: str) -> BenchmarkSpec:
    """The spec of a stored benchmark, if it makes a network of at most
    :data:`STORE_MAX_OPS` operations and :data:`STORE_MAX_ELEMS` activation elements;
    :class:`~annette_torch.calibration.StoreError` naming the store and benchmark otherwise."""
    from ..calibration import StoreError
    from ..calibration.generator import FAMILIES, resolve_params

    try:
        spec = BenchmarkSpec.from_json(text)
        ops, elems = FAMILIES[spec.family].size(resolve_params(spec))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
        raise StoreError(f"{folder}: networks.csv: benchmark {benchmark!r}: its spec {text[:200]!r} makes no "
                         f"benchmark network ({type(error).__name__}: {error})") from None
    if not (ops <= STORE_MAX_OPS and elems <= STORE_MAX_ELEMS):
        raise StoreError(f"{folder}: networks.csv: benchmark {benchmark!r}: its spec asks for {ops:.3g} operations "
                         f"and {elems:.3g} activation elements, above the {STORE_MAX_OPS:g} and {STORE_MAX_ELEMS:g} "
                         f"a fit rebuilds")
    return spec


def held_out(benchmarks, seed: int = 0, share: float = 0.2) -> np.ndarray:
    """Bool per benchmark id: in the held-out set. The split hashes each id with the
    seed, so a benchmark keeps its side as the store grows."""
    def fraction(benchmark: str) -> float:
        digest = hashlib.sha1(f"{seed}:{benchmark}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64
    return np.array([fraction(b) < share for b in benchmarks], dtype=bool)


def layer_groups(layers: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(benchmark, layer) -> the executed layer whose kernel ran it: itself when
    executed, ``fused_into`` when fused; optimized-out layers are left out."""
    named = layers[layers["layer"] != ""]
    groups = {}
    for benchmark, layer, status, into in zip(named["benchmark"], named["layer"], named["status"], named["fused_into"]):
        if status == "executed":
            groups[(benchmark, layer)] = layer
        elif status == "fused" and into:
            groups[(benchmark, layer)] = into
    return groups


def kernel_table(data: StoreData, rules: tuple[FusionRule, ...], optimize_graph: bool = False,
                 training: bool = False, counting: Counting | None = None,
                 merge_elementwise: bool = False, output_reorders: str = "") -> pd.DataFrame:
    """One row per non-free kernel of every benchmark under ``rules``: benchmark, family,
    kernel (primary layer), kind, layers (``+``-joined), time_ms, spread (the primary's),
    measured (the primary was executed, by more than data movement for a product kind),
    agrees (see module doc; with ``optimize_graph`` the benchmarks are mapped as
    :func:`map_kernels` does for a graph compiler, and with ``merge_elementwise`` for one
    that merges elementwise subgraphs), reads_input (the kernel
    reads the network's input, not another kernel's output), fused_kinds (the kinds of its
    layers after the primary, ``+``-joined), then :data:`FEATURES` (counted as ``counting``
    says, default annette_torch's counts). Per benchmark, the rows are its
    :func:`~annette_torch.mapping.map_kernels` table's non-free kernels in order.

    ``output_reorders``: a regular expression of the runtime's names of the kernels that
    convert a returned feature map to NCHW (``""``: the target has none). With one, the
    benchmarks are mapped with their :data:`~annette_torch.mapping.OUTPUT_REORDER` kernels,
    and a benchmark with one such kernel gets the summed time of its runtime rows (those
    without a layer whose kernel name matches), measured when there is such a row."""
    named = data.layers[data.layers["layer"] != ""]
    key = list(zip(named["benchmark"], named["layer"]))
    time_of = dict(zip(key, named["time_ms"].fillna(0.0)))
    spread_of = dict(zip(key, named["spread"]))
    status_of = dict(zip(key, named["status"]))
    kernel_types = named["kernel_type"].fillna("") if "kernel_type" in named else [""] * len(named)
    moves_only = {k for k, kind, types in zip(key, named["kind"], kernel_types)
                  if kind in PRODUCT_KINDS and types and set(str(types).split(";")) <= MOVEMENT_KERNELS}
    groups = layer_groups(data.layers)
    group_size: dict[tuple[str, str], int] = {}
    for (benchmark, layer), primary in groups.items():
        if not (optimize_graph and layer in data.graphs[benchmark].folded):   # merged away, not fused
            group_size[(benchmark, primary)] = group_size.get((benchmark, primary), 0) + 1

    reorder_ms = _output_reorder_ms(data, output_reorders) if output_reorders else {}
    rows, features = [], []
    for benchmark, graph in data.graphs.items():
        table = map_kernels(graph, rules, optimize_graph, True if training else None, counting,   # benchmark inputs require grad
                            merge_elementwise=merge_elementwise, reorder_outputs=bool(output_reorders))
        family = data.networks.at[benchmark, "family"]
        reorders = table.groups.get(OUTPUT_REORDER, ())
        for k in np.flatnonzero(~table.free):
            if table.kinds[k] == OUTPUT_REORDER:
                time, spread = reorder_ms.get(benchmark, (None, np.nan)) if len(reorders) == 1 else (None, np.nan)
                rows.append((benchmark, family, table.names[k], OUTPUT_REORDER, "", time or 0.0, spread,
                             time is not None, True, False, ""))
                features.append(table.features[k])
                continue
            members = table.layers[k]
            primary = members[0]
            agrees = (all(groups.get((benchmark, m)) == primary for m in members)
                      and group_size.get((benchmark, primary)) == len(members))
            rows.append((benchmark, family, primary, table.kinds[k], "+".join(members),
                         sum(time_of.get((benchmark, m), 0.0) for m in members),
                         spread_of.get((benchmark, primary), np.nan),
                         status_of.get((benchmark, primary)) == "executed" and (benchmark, primary) not in moves_only,
                         agrees,
                         not graph[primary].parents, "+".join(table.layer_kinds[k][1:])))
            features.append(table.features[k])
    frame = pd.DataFrame(rows, columns=["benchmark", "family", "kernel", "kind", "layers", "time_ms", "spread",
                                        "measured", "agrees", "reads_input", "fused_kinds"])
    return pd.concat([frame, pd.DataFrame(np.array(features).reshape(len(rows), len(FEATURES)), columns=list(FEATURES))],
                     axis=1)


def output_reorder_pattern(data: StoreData) -> str:
    """The store's backend's pattern of output-reorder kernel names
    (:attr:`~annette_torch.backends.Backend.output_reorders`; ``""``: none or unknown backend)."""
    from ..backends import BACKENDS

    return getattr(BACKENDS.get(data.fingerprint.get("backend")), "output_reorders", "")


def _output_reorder_ms(data: StoreData, pattern: str) -> dict[str, tuple[float, float]]:
    """Benchmark -> (summed time, largest spread) of its runtime rows (no layer) whose
    kernel name matches ``pattern``: the output reorders of the benchmarks that have them."""
    rows = data.layers[(data.layers["layer"] == "") & data.layers["kernel"].str.contains(pattern, regex=True)]
    summed = rows.groupby("benchmark").agg(time=("time_ms", "sum"), spread=("spread", "max"))
    return {b: (t, s) for b, t, s in zip(summed.index, summed["time"], summed["spread"])}


def benchmark_estimates(estimator: Any, data: StoreData, ids: Sequence[str]) -> np.ndarray:
    """``estimator``'s time (ms) of each benchmark ``ids`` of ``data``. Some benchmarks
    compute what a graph compiler folds on purpose (an ``eltwise`` division by a constant),
    so the estimator's :class:`~annette_torch.estimator.FreeWorkWarning`, meant for a
    user's network, is not raised for them."""
    from ..estimator import FreeWorkWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FreeWorkWarning)
        return np.array([estimator(data.graphs[b]) for b in ids], dtype=float)


def runtime_kernels_ms(data: StoreData, without_output_reorders: bool = False, gap: Gap | None = None) -> pd.Series:
    """Per benchmark, the summed time of kernels the runtime inserted (rows without a
    layer, such as layout reorders at the network's input and output), each scaled by
    ``gap`` (None: as profiled); with
    ``without_output_reorders`` (for a profile that ``reorders_outputs``, whose
    :data:`~annette_torch.mapping.OUTPUT_REORDER` kernels estimate them) the output
    reorders are left out."""
    rows = data.layers[data.layers["layer"] == ""]
    pattern = output_reorder_pattern(data) if without_output_reorders else ""
    if pattern:
        rows = rows[~rows["kernel"].str.contains(pattern, regex=True)]
    sums = rows.groupby("benchmark")["time_ms"].sum() if gap is None else scaled_kernel_sums(rows, gap)
    return sums.reindex(data.networks.index, fill_value=0.0)


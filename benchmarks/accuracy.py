"""How accurate is the estimator? Estimates of each layer-model variant against end-to-end
latency measured on this machine (a benchmark: prints tables, asserts nothing).

    python benchmarks/accuracy.py --backend openvino-cpu --threads 1 [--precision bf16] --profile PROFILE \
        [--sets zoo,nb201] [--models a,b] [--nb201 50] [--rounds 12 --warmup 5 --repeats 10] \
        [--statistic p10] [--drift none] [--remeasure] [--measured DIR] [--plot FILE.png] [--json FILE]
        [--ray ADDRESS]

Sets: ``zoo`` (22 torchvision models, batch 1, default resolution), ``timm`` (61 timm
models chosen by a rule, :data:`TIMM`: CNNs, vision transformers, hybrids; also scored as
its subsets ``timm cnn`` and ``timm transformer``), ``dense``
(:data:`DENSE`: torchvision's segmentation models and its detection models' backbones with
their feature pyramids, 320x320, every output returned), ``mbv2``
(:data:`MBV2_COUNT` random candidates of :class:`~annette_torch.nas.MobileNetV2Space`, 224x224)
and ``nb201`` (NAS-Bench-201 cells sampled with seed 201, input 1x3x32x32, built as the benchmark's
reference code builds them: :data:`annette_torch.nas.nasbench201.CELL_VERSION` 2). Rows of
set ``nb201-v1`` in the results files are cells of the older construction (``none`` edges
and unused nodes left out); no set of this benchmark matches them, so they are kept as
history and never scored against the cells built now. Networks are measured
with the measuring protocol (:mod:`annette_torch.measure.protocol`: interleaved rounds,
optionally a drift correction against a canary, the statistic of the runs), by default
as ``adapt`` and ``check`` time their reference networks
(:data:`~annette_torch.measure.networks.NETWORK_PROTOCOL`: 12 rounds of each network compiled
once, each round's p10 against the canary, the median over rounds; on a board 3 rounds
pooled). Measurements are kept in
``benchmarks/results/<fingerprint folder>/measured.csv`` (one row appended per network, a
rerun skips measured networks unless ``--remeasure``; the newest row of a network wins)
beside the ``fingerprint.json`` of the backend that took them and the folder's
``protocol.json`` (:mod:`annette_torch.measure.record`): rows older than its ``since``
were taken with another protocol and are measured again. A folder measured before the
protocol (no ``protocol.json``) holds rows without drift correction: ``--drift none``
re-scores them (``--statistic median``: the median of the rounds' medians, ``p10``: the
pooled p10) without measuring; with the canary everything is measured anew. ``median_ms``, ``p10_ms`` and
``p90_ms`` are those of the pooled drift-corrected runs; the ground truth is the column
of ``--statistic``. Each session appends the machine's state (steal, load, canary
spread) to ``sessions.jsonl`` there; the report prints it beside the accuracy.
``--ground-truth FOLDER`` scores on that results folder as it is (another machine's, e.g. the
committed ``benchmarks/results/<fingerprint folder>`` of the README's figures), measuring
nothing, whatever this machine is.
A profile adapted (``annette-torch adapt``) or anchored (``fit`` on a campaign's
references) on networks that are also in these sets (the reference pool holds 17 of the
zoo's classifiers) is not scored on them: they form set ``references`` (in-sample, marked
in the per-network table) and are left out of their own set and ``all``.
Variants: ``flops`` (time = scale * ops, one scale fitted in-sample as the geometric
mean of measured/ops, so it is optimistic) and each layer-model type of the profile
with (``+map``) and without (``-map``) the mapping model.
``--summary LABEL`` prints one line instead of the report, for comparing profiles or
ground truths in a script: the label, the main variant's MAPE per set and over all, the
share of all within ±10 %, and the errors of the networks ``--show`` names.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import hashlib
import io
import json
import os
import random
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr
from torch.utils._pytree import tree_leaves
from tqdm import tqdm

from annette_torch import Estimator, UnknownKindWarning, load_profile, trace
from annette_torch.atomic import atomic_path
from annette_torch.backends import get_backend
from annette_torch.calibration.store import fingerprint_folder
from annette_torch.measure import Measured, Protocol
from annette_torch.measure.arguments import BOARD_OTHERWISE, add_protocol_arguments, whole_network_protocol
from annette_torch.measure.networks import NETWORK_PROTOCOL, measure_networks as measure_with_protocol
from annette_torch.measure.noise import round_to_round
from annette_torch.measure.record import LEGACY, describe, differences, new_record, read_record, write_record
from annette_torch.nas import MobileNetV2Space
from annette_torch.nas.nasbench201 import NB201Network, sample_architectures
from annette_torch.transfer.references import Network, torchvision_model

ZOO = ("resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "densenet121", "squeezenet1_0",
       "googlenet", "inception_v3", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large",
       "shufflenet_v2_x1_0", "mnasnet1_0", "efficientnet_b0", "regnet_x_400mf", "regnet_y_400mf",
       "convnext_tiny", "vgg11", "alexnet", "vit_b_16", "swin_t", "resnet34")
#: every model of ``benchmarks/timm_coverage.py``'s list (the smallest variant of each timm
#: family) of at most 1.5 GMACs at its default input, as ``torch.utils.flop_counter`` counts
#: them (timm 1.0.31, 2026-12-01): a sample chosen by rule, not by how well it is estimated
TIMM = (
    "dla60x_c", "regnetx_002", "regnety_002", "regnetz_b16", "cspnext_tiny", "ese_vovnet19b_dw",
    "hgnetv2_b0", "gernet_s", "mobileone_s0", "efficientnet_b0", "tf_efficientnetv2_b0",
    "mobilenetv2_050", "mobilenetv3_small_050", "mobilenetv4_conv_small", "mnasnet_small", "fbnetc_100",
    "spnasnet_100", "mixnet_s", "ghostnet_050", "ghostnetv2_100", "repghostnet_050", "rexnet_100",
    "rexnetr_100", "hardcorenas_a", "lcnet_050", "tinynet_e", "fasternet_t0", "starnet_s050",
    "repvit_m0_9", "lcnetv2_small", "cpubone_nano", "convnext_atto", "convnextv2_atto",
    "mambaout_femto", "vit_tiny_patch16_224", "deit_tiny_patch16_224",
    "deit_tiny_distilled_patch16_224", "xcit_nano_12_p16_224", "convit_tiny", "pit_ti_224",
    "visformer_tiny", "vit_tiny_r_s16_p8_224", "pvt_v2_b0", "tiny_vit_5m_224", "iformer_s",
    "levit_128s", "levit_conv_128s", "efficientformer_l1", "efficientformerv2_s0", "edgenext_xx_small",
    "mobilevit_xxs", "mobilevitv2_050", "fastvit_t8", "efficientvit_b0", "efficientvit_m0", "shvit_s1",
    "csatv2", "swiftformer_xs", "lowformer_b0", "efficientvim_m1", "gmlp_ti16_224",
)
#: the CNNs of :data:`TIMM` (mobile nets included); the others are vision transformers and
#: hybrids. Scored as the subsets ``timm cnn`` and ``timm transformer`` beside ``timm``.
TIMM_CNNS = TIMM[:TIMM.index("vit_tiny_patch16_224")]
SUBSETS = {"timm cnn": ("timm", frozenset(TIMM_CNNS)),
           "timm transformer": ("timm", frozenset(TIMM) - frozenset(TIMM_CNNS))}
#: the timm models whose default input is not 224 x 224 (their pretrained configuration)
TIMM_INPUT_SIZE = {'tf_efficientnetv2_b0': 192, 'tinynet_e': 106, 'edgenext_xx_small': 256, 'mobilevit_xxs': 256, 'mobilevitv2_050': 256, 'fastvit_t8': 256, 'csatv2': 512}
#: torchvision segmentation models (whole) and detection models (their ``backbone``: the
#: feature extractor and pyramid; the heads' box decoding and NMS are not ONNX-exportable
#: as one static graph), each at 320 x 320
#: (the ResNet-50 segmentation models, ~1 s an inference on one core, are left out for time)
DENSE = (("lraspp_mobilenet_v3_large", "model"), ("deeplabv3_mobilenet_v3_large", "model"),
         ("fasterrcnn_mobilenet_v3_large_fpn", "backbone"), ("retinanet_resnet50_fpn", "backbone"),
         ("ssdlite320_mobilenet_v3_large", "backbone"))
DENSE_SIZE = 320
NB201_SEED = 201
#: random candidates of the MobileNetV2 search space: how many, drawn with this seed
MBV2_COUNT, MBV2_SEED = 20, 2
MODEL_TYPES = ("roofline", "refined_roofline", "statistical", "mixed")
COLUMNS = ("set", "network", "input_shape", "median_ms", "p10_ms", "p90_ms", "spread", "repeats", "measured_at")
RESULTS_ROOT = Path(__file__).parent / "results"
#: the column of measured.csv that holds each statistic the benchmark may use as ground truth
GROUND_TRUTH = {"p10": "p10_ms", "median": "median_ms"}
#: how the benchmark times networks unless told otherwise: as ``adapt`` and ``check`` do (12 rounds,
#: compiled once, canary, median over rounds; 3 pooled rounds on a board)
DEFAULT_PROTOCOL = NETWORK_PROTOCOL


class AllOutputs(torch.nn.Module):
    """``model`` returning its outputs (dicts and lists of tensors) flattened into one tuple
    in order, so the exporters and the tracer see the same graph."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(tree_leaves(self.model(x)))    # under torch.fx the leaves are proxies


def dense_model(name: str, part: str) -> torch.nn.Module:
    """torchvision segmentation model ``name`` (``part`` = "model") or a detection model's
    ``backbone``, with no weights anywhere, wrapped in :class:`AllOutputs`, in eval mode."""
    import torchvision
    model = torchvision.models.get_model(name, weights=None, weights_backbone=None)
    return AllOutputs(model if part == "model" else getattr(model, part)).eval()


def networks(sets: list[str], models: list[str] | None = None, nb201: int = 50) -> list[Network]:
    """The networks of ``sets`` (``zoo``, ``timm``, ``dense``, ``mbv2``, ``nb201``), only those
    named in ``models`` if given."""
    found = []
    for name in sets:
        if name == "zoo":
            found += [Network("zoo", m, (1, 3, 299, 299) if m == "inception_v3" else (1, 3, 224, 224),
                              lambda m=m: torchvision_model(m)) for m in ZOO]
        elif name == "timm":
            found += [Network("timm", m, (1, 3, TIMM_INPUT_SIZE.get(m, 224), TIMM_INPUT_SIZE.get(m, 224)),
                              lambda m=m: timm_model(m)) for m in TIMM]
        elif name == "dense":
            found += [Network("dense", m if part == "model" else f"{m}.{part}", (1, 3, DENSE_SIZE, DENSE_SIZE),
                              lambda m=m, part=part: dense_model(m, part)) for m, part in DENSE]
        elif name == "mbv2":
            space, rng = MobileNetV2Space(), random.Random(MBV2_SEED)
            for arch in [space.sample(rng) for _ in range(MBV2_COUNT)]:
                found.append(Network("mbv2", mbv2_name(arch), (1, 3, 224, 224), lambda a=arch: space.build(a)))
        elif name == "nb201":
            found += [Network("nb201", a, (1, 3, 32, 32), lambda a=a: NB201Network(a).eval())
                      for a in sample_architectures(nb201, seed=NB201_SEED)]
        else:
            raise SystemExit(f"unknown set {name!r}; sets are zoo, timm, dense, mbv2, nb201")
    return [n for n in found if models is None or n.name in models]


def mbv2_name(arch) -> str:
    """A MobileNetV2-space architecture as ``k3e6w1d2-...``: per stage kernel, expansion, width, depth."""
    return "-".join(f"k{c.kernel}e{c.expansion}w{c.width:g}d{c.depth}" for c in arch)


def timm_model(name: str) -> torch.nn.Module:
    """timm model ``name`` with random weights, in eval mode."""
    import timm
    return timm.create_model(name, pretrained=False).eval()


class ResultsError(RuntimeError):
    """A results folder holds measurements of another backend fingerprint."""


def results_folder(root: str | os.PathLike, fingerprint: dict) -> Path:
    """The folder of ``fingerprint`` under ``root``, with its ``fingerprint.json`` written
    (``ResultsError`` if it records a different fingerprint)."""
    folder = Path(root) / fingerprint_folder(fingerprint)
    path = folder / "fingerprint.json"
    if path.exists():
        recorded = json.loads(path.read_text())
        if recorded != fingerprint:
            raise ResultsError(f"{path} records {recorded}, but this backend is {fingerprint}; "
                               f"measure into another --results folder")
    else:
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(fingerprint, indent=1) + "\n")
    return folder


def read_measured(folder: str | os.PathLike, since: str | None = None) -> pd.DataFrame:
    """The newest row per (set, network) of ``folder/measured.csv`` (empty if none), of
    rows measured at or after ``since`` (ISO time) if given; a last line cut by a kill is
    ignored."""
    path = Path(folder) / "measured.csv"
    data = path.read_text() if path.exists() else ""
    lines = data.splitlines(keepends=True)
    complete = "".join(line for line in lines if line.endswith("\n"))
    if not complete:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.read_csv(io.StringIO(complete), dtype={"set": str, "network": str, "input_shape": str})
    if since is not None:
        frame = frame[pd.to_datetime(frame["measured_at"], format="ISO8601") >= pd.Timestamp(since)]
    return frame.drop_duplicates(["set", "network"], keep="last").reset_index(drop=True)


def folder_record(folder: Path) -> dict | None:
    """The folder's protocol record (:mod:`annette_torch.measure.record`); for a folder
    measured before records existed, :data:`~annette_torch.measure.record.LEGACY` (its rows
    hold the median of the rounds' medians and the pooled p10, without drift correction);
    None for a folder without measurements."""
    record = read_record(folder)
    if record is None and not read_measured(folder).empty:
        record = dict(LEGACY)
    return record


def ground_truth(folder: str | os.PathLike) -> tuple[pd.DataFrame, str]:
    """The rows of ``folder`` measured under its protocol record, and the statistic the
    record names as their ground truth (:data:`GROUND_TRUTH` gives its column)."""
    record = folder_record(Path(folder)) or dict(LEGACY)
    statistic = record["statistic"] if record["statistic"] in GROUND_TRUTH else DEFAULT_PROTOCOL.statistic
    return read_measured(folder, record["since"]), statistic


def protocol_record(folder: Path, protocol: Protocol) -> dict:
    """The folder's record, started anew (rows before it no longer count) when it has none
    or another drift correction."""
    record = folder_record(folder)
    if record is None or differences(record, protocol, statistic=False):
        record = new_record(protocol)
        write_record(folder, record)
    return record


def _append_row(path: Path, row: dict) -> None:
    """Append ``row`` (and the header to a new file) with one write, then fsync; a line cut
    by an earlier kill is removed first."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, lineterminator="\n")
    if not path.exists() or path.stat().st_size == 0:
        writer.writeheader()
    elif not path.read_bytes().endswith(b"\n"):
        with open(path, "rb+") as handle:
            handle.truncate(path.read_bytes().rfind(b"\n") + 1)
    writer.writerow(row)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, buffer.getvalue().encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def measuring_lock(root: str | os.PathLike) -> Iterator[None]:
    """Hold a lock (in the temp dir, one per results root) while measuring, so two runs never
    measure at once on this machine; a second run waits, saying so."""
    digest = hashlib.sha1(str(Path(root).resolve()).encode()).hexdigest()[:8]
    with open(Path(tempfile.gettempdir()) / f"annette_accuracy_{digest}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"another run is measuring into {root}; waiting for it to finish", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _row(net: Network, measured: Measured) -> dict:
    """The results row of ``net``: median, p10 and p90 of its pooled, drift-corrected runs."""
    median, p10 = measured.value("median"), measured.value("p10")
    p90 = float(np.percentile(measured.runs_ms, 90))
    return {"set": net.set, "network": net.name, "input_shape": "x".join(map(str, net.input_shape)),
            "median_ms": f"{median:.6g}", "p10_ms": f"{p10:.6g}", "p90_ms": f"{p90:.6g}",
            "spread": f"{measured.spread:.4f}", "repeats": len(measured.runs_ms),
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="microseconds")}


@dataclass(frozen=True)
class Fleet:
    """Measure on a node of a Ray cluster (``--ray``, :mod:`annette_torch.fleet`) that
    advertises ``resource`` (None: the backend's name), ``CHUNK`` networks per session."""

    address: str
    resource: str | None = None
    CHUNK = 8


def _fleet_connection(fleet: Fleet, backend):
    """One connection to the fleet's cluster for all of a run's sessions (``--ray local``: one cluster)."""
    from annette_torch.fleet import connected
    return connected(fleet.address, fleet.resource or backend.name, backend.threads)


def measure_networks(backend, nets: list[Network], root: str | os.PathLike = RESULTS_ROOT,
                     protocol: Protocol = DEFAULT_PROTOCOL, remeasure: bool = False,
                     progress: bool = True, fleet: Fleet | None = None) -> tuple[pd.DataFrame, Path, list[str]]:
    """Measure ``nets`` not yet in the results folder of ``backend`` under its protocol
    record (all with ``remeasure``) with ``protocol``, under :func:`measuring_lock`,
    appending a network's row as soon as its last round is done and the session's
    machine state to ``sessions.jsonl``. With ``fleet`` they are measured on a fleet
    node instead, one session per :attr:`Fleet.CHUNK` networks (rows appended when a
    session comes back), into the folder of that node's fingerprint. Returns (rows of
    ``nets``, the CSV path, failure messages)."""
    if protocol.statistic not in GROUND_TRUTH:
        raise ValueError(f"the results files hold {', '.join(GROUND_TRUTH)} of the runs; "
                         f"statistic {protocol.statistic!r} cannot be the ground truth")
    if fleet is not None:
        from annette_torch.fleet import device_fingerprint, measure_networks_on_fleet
        fingerprint = device_fingerprint(backend.name, fleet.address, fleet.resource, backend.threads,
                                         backend.precision)
    with measuring_lock(root):
        folder = results_folder(root, backend.fingerprint() if fleet is None else fingerprint)
        record = protocol_record(folder, protocol)
        path = folder / "measured.csv"
        previous = read_measured(folder, record["since"])
        done = set() if remeasure else set(zip(previous["set"], previous["network"]))
        todo = {(n.set, n.name): n for n in nets if (n.set, n.name) not in done}
        failures = []
        if todo:
            def started(reference_ms):
                if reference_ms is not None and record.get("canary_ms") is None:
                    record["canary_ms"] = reference_ms
                    write_record(folder, record)

            def append(key, measured):
                _append_row(path, _row(todo[key], measured))

            items = [(key, net.build, net.input_shape) for key, net in todo.items()]
            if fleet is None:
                sessions = [measure_with_protocol(backend, items, protocol, reference_ms=record.get("canary_ms"),
                                                  on_start=started, on_measured=append, progress=progress)]
            else:
                sessions = []
                for start in tqdm(range(0, len(items), Fleet.CHUNK), desc=f"measure on the fleet {fleet.address}",
                                  unit="session", disable=not progress, file=sys.stderr):
                    node_fingerprint, session = measure_networks_on_fleet(
                        backend.name, items[start:start + Fleet.CHUNK], protocol, fleet.address, fleet.resource,
                        backend.threads, backend.precision, reference_ms=record.get("canary_ms"), on_start=started,
                        on_measured=append)
                    if node_fingerprint != fingerprint:
                        raise ResultsError(f"a fleet node measured {node_fingerprint}, not {fingerprint}: the nodes "
                                           f"advertising {fleet.resource or backend.name!r} are different devices; "
                                           f"give each its own --ray-resource")
                    sessions.append(session)
            for session in sessions:
                failures += [f"{key[0]}/{key[1]}: {message}" for key, message in session.failures.items()]
                if session.measured:
                    _append_session(folder, protocol, session)
    measured = read_measured(folder, record["since"])
    wanted = {(n.set, n.name) for n in nets}
    keep = [key in wanted for key in zip(measured["set"], measured["network"])]
    return measured[keep].reset_index(drop=True), path, failures


def _append_session(folder: Path, protocol: Protocol, session) -> None:
    """One line of ``sessions.jsonl``: when, how, on what machine state, how many networks,
    and per set the mean round-to-round difference of the networks' statistic (the ground
    truth's own reproducibility, :func:`~annette_torch.measure.noise.round_to_round`)."""
    by_set: dict[str, list[float]] = {}
    for (set_name, _), measured in session.measured.items():
        if len(measured.factors) > 1:
            by_set.setdefault(set_name, []).append(round_to_round(measured.round_values()))
    line = {"finished_utc": datetime.now(timezone.utc).isoformat(timespec="microseconds"), "protocol": protocol.to_json(),
            "reference_ms": session.session.reference_ms, "before": str(session.before), "during": str(session.during),
            "warnings": session.before.warnings + session.during.warnings, "networks": len(session.measured),
            "failed": len(session.failures),
            "round_to_round": {name: float(np.mean(values)) for name, values in by_set.items()}}
    with open(folder / "sessions.jsonl", "a") as handle:
        handle.write(json.dumps(line) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_sessions(folder: Path, since: str | None = None) -> list[dict]:
    """The sessions of ``sessions.jsonl`` that finished at or after ``since``."""
    path = folder / "sessions.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    sessions = [json.loads(line) for line in lines if line.strip().endswith("}")]
    return [s for s in sessions if since is None or pd.Timestamp(s["finished_utc"]) >= pd.Timestamp(since)]


def metrics(measured_ms, estimated_ms) -> dict[str, float]:
    """MAPE %, share within +-10 % (%), Spearman rho and max |error| % of estimates."""
    measured, estimated = np.asarray(measured_ms, float), np.asarray(estimated_ms, float)
    error = np.abs(estimated - measured) / measured * 100
    rho = float(spearmanr(measured, estimated)[0]) if len(measured) > 1 else float("nan")
    return {"mape": float(error.mean()), "within10": float((error <= 10).mean() * 100),
            "spearman": rho, "max_error": float(error.max())}


def evaluate(profile: str, nets: list[Network], measured: pd.DataFrame,
             graphs: dict[tuple[str, str], object] | None = None, statistic: str = DEFAULT_PROTOCOL.statistic,
             measured_kernels: str | None = None) -> dict:
    """Estimate each measured network of ``nets`` with every variant and score them
    against the ``statistic`` column of ``measured`` (:data:`GROUND_TRUTH`).

    ``graphs`` caches traced graphs by (set, name) across calls. ``measured_kernels``: a
    table of kernels measured in context (``calibrate --for``) every estimator consults
    first (``Estimator(measured=...)``). Returns ``variants``,
    ``sets`` (metrics per set and variant; the reference networks an adapted or anchored
    profile was fitted on count only in set ``references``, not in their own set or
    ``all``), ``rows`` (per network: measured, spread, ops, ``reference``, one estimate per
    variant), ``notes``, ``unknown`` (network -> unknown-kind warnings) and ``failures``
    (networks that failed to trace)."""
    graphs = {} if graphs is None else graphs
    by_key = {(r.set, r.network): r for r in measured.itertuples()}
    truth = GROUND_TRUTH[statistic]
    loaded = load_profile(profile)
    types = loaded.model_types()
    references = set(loaded.adaptation.reference_networks) if loaded.adaptation is not None else set()
    notes = [f"profile {profile!r} has no {t!r} layer models: skipped" for t in MODEL_TYPES if t not in types]
    estimators = {f"{t}{'+map' if m else '-map'}": Estimator(loaded, model_type=t, use_mapping=m,
                                                              measured=measured_kernels)
                  for t in MODEL_TYPES if t in types for m in (True, False)}
    rows, unknown, failures = [], {}, []
    for net in nets:
        if (net.set, net.name) not in by_key:
            continue
        key = (net.set, net.name)
        try:
            if key not in graphs:
                graphs[key] = trace(net.build(), input_shape=net.input_shape, name=net.name)
        except Exception as error:  # noqa: BLE001 -- report and carry on with the others
            failures.append(f"{net.set}/{net.name}: {type(error).__name__}: {str(error).splitlines()[0]}")
            continue
        row = {"set": net.set, "network": net.name, "measured_ms": float(getattr(by_key[key], truth)),
               "spread": float(by_key[key].spread), "ops": graphs[key].total("ops"),
               "reference": net.name in references}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for variant, est in estimators.items():
                row[variant] = est(graphs[key])
        count = sum(issubclass(w.category, UnknownKindWarning) for w in caught)
        if count:
            unknown[net.name] = str(next(w.message for w in caught if issubclass(w.category, UnknownKindWarning)))
        rows.append(row)
    if not rows:
        return {"variants": [], "sets": {}, "rows": [], "notes": notes, "unknown": unknown, "failures": failures}
    frame = pd.DataFrame(rows)
    scale = float(np.exp(np.mean(np.log(frame["measured_ms"] / frame["ops"]))))
    frame.insert(5, "flops", frame["ops"] * scale)
    notes.append(f"flops: time = {scale:.4g} ms/op * ops, scale fitted in-sample on these {len(frame)} "
                 f"networks (geometric mean of measured/ops): an optimistic baseline")
    variants = ["flops", *estimators]
    held_out = frame[~frame["reference"]]
    if len(held_out) < len(frame):
        notes.append(f"{len(frame) - len(held_out)} of these networks are reference networks the profile was "
                     f"adapted or anchored on (in-sample): scored apart as set 'references', left out of the others")
    subsets = [(name, held_out[(held_out["set"] == of) & held_out["network"].isin(members)])
               for name, (of, members) in SUBSETS.items()]
    groups = [*held_out.groupby("set", sort=False), *[(n, g) for n, g in subsets if len(g) >= 2],
              *([("references", frame[frame["reference"]])] if len(held_out) < len(frame) else []),
              ("all", held_out)]
    sets = {name: {v: metrics(group["measured_ms"], group[v]) for v in variants} for name, group in groups
            if len(group)}
    return {"variants": variants, "sets": sets, "rows": frame.to_dict("records"), "notes": notes,
            "unknown": unknown, "failures": failures}


def print_report(summary: dict, source: Path, measured: pd.DataFrame, sessions: list[dict] = (),
                 record: dict | None = None) -> None:
    """The measurements' provenance and machine state, the per-set tables and the
    per-network table of the main variant."""
    when = sorted(measured["measured_at"])
    print(f"measurements: {source} ({len(measured)} networks, taken {when[0]} .. {when[-1]} UTC)")
    if record is not None:
        print(f"ground truth: {describe(record)}")
    for session in sessions:
        print(f"session finished {session['finished_utc']}: {session['networks']} networks; before: "
              f"{session['before']}; during: {session['during']}"
              + "".join(f"\n  warning: {w}" for w in session["warnings"]))
        if session.get("round_to_round"):
            print(f"  ground truth round to round ({session['protocol']['statistic']}, mean |diff| of consecutive "
                  "rounds): " + ", ".join(f"{name} {value * 100:.2f}%" for name, value in
                                          session["round_to_round"].items()))
    for note in summary["notes"]:
        print(f"note: {note}")
    for name, table in summary["sets"].items():
        if name == "all" and len(summary["sets"]) == 2:
            continue                                   # one set: "all" repeats it
        print(f"\nset {name}\n{'variant':<22}{'MAPE %':>9}{'±10 %':>8}{'rho':>8}{'max |err| %':>13}")
        for variant, m in table.items():
            print(f"{variant:<22}{m['mape']:9.1f}{m['within10']:8.0f}{m['spearman']:8.3f}{m['max_error']:13.1f}")
    main = main_variant(summary["variants"])
    print(f"\nper network ({main})\n{'set':<6}{'network':<92}{'ms':>9}{'spread':>8}{'est ms':>9}{'err %':>8}")
    for row in summary["rows"]:
        error = (row[main] - row["measured_ms"]) / row["measured_ms"] * 100
        print(f"{row['set']:<6}{row['network']:<92}{row['measured_ms']:9.3f}{row['spread']:8.3f}"
              f"{row[main]:9.3f}{error:8.1f}" + ("  reference" if row.get("reference") else ""))
    if summary["unknown"]:
        print(f"\nunknown kinds in {len(summary['unknown'])} networks (estimated with the roofline fallback):")
        for message in summary["unknown"].values():
            print(f"  {message}")
    for failure in summary["failures"]:
        print(f"trace failed: {failure}")


def summary_line(summary: dict, label: str, show: list[str] = ()) -> str:
    """``label``, the main variant's MAPE (%) per set of ``summary`` (:func:`evaluate`) and
    over all, the share of all within ±10 %, then the error (%) of each network in ``show``."""
    if not summary["rows"]:
        return f"{label}  no network estimated"
    main = main_variant(summary["variants"])
    cells = [f"{name} {table[main]['mape']:.2f}" for name, table in summary["sets"].items()]
    errors = {row["network"]: (row[main] / row["measured_ms"] - 1) * 100 for row in summary["rows"]}
    shown = [f"{name} {errors[name]:+.1f}" if name in errors else f"{name} -" for name in show]
    return (f"{label}  " + "  ".join(cells) + f"  (±10 %: {summary['sets']['all'][main]['within10']:.0f} %)"
            + (f"  {', '.join(shown)}" if shown else ""))


def main_variant(variants: list[str]) -> str:
    """``mixed+map`` if evaluated, else the last evaluated variant with mapping."""
    mapped = [v for v in variants if v.endswith("+map")]
    return "mixed+map" if "mixed+map" in variants else (mapped or variants)[-1]


def plot(summary: dict, path: str) -> None:
    """Log-log scatter of measured vs estimated, one subplot per variant with mapping and flops."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v in summary["variants"] if not v.endswith("-map")]
    frame = pd.DataFrame(summary["rows"])
    cols = min(3, len(variants))
    rows = -(-len(variants) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4 * rows), squeeze=False)
    low = min(frame["measured_ms"].min(), frame[variants].min().min()) / 1.5
    high = max(frame["measured_ms"].max(), frame[variants].max().max()) * 1.5
    line = np.geomspace(low, high, 50)
    for ax, variant in zip(axes.flat, variants):
        for name, group in frame.groupby("set", sort=False):
            ax.scatter(group["measured_ms"], group[variant], s=14, label=name)
        ax.plot(line, line, "k-", lw=0.8)
        ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.25, lw=0)
        ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high), xlabel="measured ms",
               ylabel="estimated ms", title=f"{variant}: MAPE {summary['sets']['all'][variant]['mape']:.1f} %")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(variants):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def recorded_fingerprint(folder: Path) -> dict | None:
    """The ``fingerprint.json`` a results folder records (None without one)."""
    path = folder / "fingerprint.json"
    return json.loads(path.read_text()) if path.exists() else None


def recorded_ground_truth(args: argparse.Namespace, nets: list[Network]) -> tuple[pd.DataFrame, Path, list[str]]:
    """(rows of ``nets`` in the ``--ground-truth`` folder, its CSV path, no failures);
    ``SystemExit`` when it holds no measurements or the options ask to measure."""
    if args.remeasure or args.ray:
        raise SystemExit("--ground-truth scores a recorded folder; it cannot be combined with --remeasure or --ray")
    folder = Path(args.ground_truth)
    rows, _ = ground_truth(folder)
    if rows.empty:
        raise SystemExit(f"{folder} holds no measurements (measured.csv)")
    wanted = {(n.set, n.name) for n in nets}
    rows = rows[[key in wanted for key in zip(rows["set"], rows["network"])]].reset_index(drop=True)
    print(f"ground truth: {folder} (recorded; nothing measured)")
    return rows, folder / "measured.csv", []


def main() -> None:
    # torch's TorchScript exporter logs its whole IR graph on a failed export, to stdout
    # (its logging switch is always on: setup_onnx_logging tests the function, not its
    # result); in this script's process, send that log to stderr, away from the tables
    torch._C._jit_set_onnx_log_output_stream("stderr")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="openvino-cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", default=None, help="arithmetic precision of the backend (default: its first, f32)")
    parser.add_argument("--profile", required=True)
    parser.add_argument("--sets", default="zoo,nb201")
    parser.add_argument("--models", default=None, help="comma-separated network names to keep")
    parser.add_argument("--nb201", type=int, default=50, help="NAS-Bench-201 cells to sample")
    parser.add_argument("--remeasure", action="store_true")
    parser.add_argument("--measured", default=None,
                        help="kernels measured in context (calibrate --for) the estimates consult first")
    add_protocol_arguments(parser, DEFAULT_PROTOCOL, statistics=tuple(GROUND_TRUTH), otherwise=BOARD_OTHERWISE)
    parser.add_argument("--results", default=str(RESULTS_ROOT), help="root of the results folders")
    parser.add_argument("--ground-truth", default=None, metavar="FOLDER",
                        help="score on this results folder (any machine's) as it is; measures nothing")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="measure on a node of this Ray cluster (auto, local, HOST:PORT) that advertises the "
                             "device (pip install 'annette_torch[fleet]'; calibration/README.md)")
    parser.add_argument("--ray-resource", default=None, help="with --ray: the custom resource the device's nodes "
                                                             "advertise (default: the backend's name)")
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--summary", default=None, metavar="LABEL",
                        help="print one line (LABEL, MAPE per set and over all, share within ±10 %%) "
                             "instead of the report")
    parser.add_argument("--show", default="", metavar="NETWORKS",
                        help="with --summary: comma-separated networks whose errors the line ends with")
    args = parser.parse_args()
    torch.set_num_threads(1)
    nets = networks(args.sets.split(","), args.models.split(",") if args.models else None, args.nb201)
    try:
        backend = get_backend(args.backend, threads=args.threads, precision=args.precision)
        protocol = whole_network_protocol(args, backend)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    if protocol.rounds * protocol.repeats < 20:
        raise SystemExit("--rounds x --repeats must be at least 20 for a stable p10 and median")
    if args.ground_truth is not None:
        measured, source, failures = recorded_ground_truth(args, nets)
    else:
        fleet = Fleet(args.ray, args.ray_resource) if args.ray else None
        if fleet is None:
            backend.prepare_process()    # this process only measures: set it up as a campaign's worker is
        print(f"measuring protocol: {protocol}")
        start = time.perf_counter()
        try:
            with contextlib.nullcontext() if fleet is None else _fleet_connection(fleet, backend):
                measured, source, failures = measure_networks(backend, nets, args.results, protocol, args.remeasure,
                                                              fleet=fleet)
        except ResultsError as error:
            raise SystemExit(str(error)) from None
        print(f"measuring took {time.perf_counter() - start:.0f} s; median spread {measured['spread'].median():.3f}")
    for failure in failures:        # the first line: an exporter's message goes on with its whole TorchScript graph
        print(f"measure failed: {failure.strip().splitlines()[0] if failure.strip() else failure}")
    if measured.empty:
        raise SystemExit("no measurements to evaluate")
    summary = evaluate(args.profile, nets, measured, statistic=protocol.statistic, measured_kernels=args.measured)
    record = folder_record(source.parent)
    sessions = read_sessions(source.parent, record["since"])
    if args.summary is not None:
        for failure in summary["failures"]:       # before the line, which scripts take as the last
            print(f"trace failed: {failure}")
        print(summary_line(summary, args.summary, [n for n in args.show.split(",") if n]))
    else:
        print_report(summary, source, measured, sessions, {**record, "statistic": protocol.statistic})
    if args.json:
        with atomic_path(args.json) as tmp:
            tmp.write_text(json.dumps({"source": str(source), "profile": args.profile,
                                       "fingerprint": recorded_fingerprint(source.parent) if args.ground_truth
                                       else backend.fingerprint(), "protocol": record,
                                       "sessions": sessions, **summary}, indent=1) + "\n")
    if args.plot:
        plot(summary, args.plot)


if __name__ == "__main__":
    main()

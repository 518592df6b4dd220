"""``annette-torch``: estimate a model from the command line, list profiles.

    annette-torch estimate MODEL [--profile P] [--input-shape 1,3,224,224[;SHAPE...]] [--input-dtype int64]
                  [--seq-len N] [--example-inputs file.py:function] [--json] [--csv FILE] [--plot FILE.png]
                  [--model-type T] [--no-mapping] [--all] [--measured DIR]
        MODEL: torchvision:NAME, timm:NAME, hf:CONFIG_OR_MODEL_CLASS, hf:path/config.json, file.py:factory, model.onnx
    annette-torch profiles
    annette-torch calibrate --backend openvino-cpu --sweep quick --out DIR [--threads N]
                  [--precision P] [--minutes M] [--timeout S] [--config FILE] [--dry-run] [--retry-failed]
                  [--rounds R] [--warmup W] [--repeats N] [--statistic S] [--drift D] [--stop-after-failures K]
                  [--ray auto|local|HOST:PORT [--ray-resource NAME] [--ray-chunk N]]
    annette-torch calibrate --backend B --minutes M [--prior PROFILE] [--sweep POOL] [--for MODEL ...]
                  [--references K] --out DIR
    annette-torch calibrate --backend B --for MODEL [MODEL ...] --out DIR [--profile P] [--input-shape S]
                  [--threads N] [--precision P] [--rounds R] [--warmup W] [--repeats N] [--statistic S] [--drift D]
    annette-torch calibrate --backend B --weight-rereads MODEL [MODEL ...] --out DIR [--profile P] [--threads N]
                  [--warmup W] [--repeats N]
    annette-torch noise --backend B [--threads N] [--precision P] [--rounds R] [--minutes M]
    annette-torch check --profile P [--samples K] [--seed S] [--tolerance PERCENT]   (exit 1: the profile is off here)
    annette-torch stores DIR [--compact] [--by-family] [--drop-family FAMILY]
    annette-torch fit --data STORE_DIR --out PROFILE_DIR [--name NAME] [--seed S] [--test-share F] [--first N] [--sample N]
                  [--prior PROFILE] [--no-anchor | --anchor-terms TERMS]
    annette-torch adapt --from PROFILE[,PROFILE...] --backend B [--threads N] [--precision P] --samples K
                  [--seed S] [--mapping M] --out FILE.json [--name NAME] [--rounds R] [--warmup W] [--repeats N]
                  [--ray ADDRESS [--ray-resource NAME]]
    annette-torch adapt --descriptor DEVICE.json [--from PROFILE,...] --out FILE.json [--name NAME]

Every measuring command uses the measuring protocol (:mod:`annette_torch.measure.protocol`).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import warnings

import pandas as pd
import torch

from . import __version__
from .atomic import atomic_path
from .estimator import DEFAULT_PROFILE, Estimator
from .graph import LayerGraph, TraceError
from .kinds import PRODUCT_KINDS
from .memory import MemoryEstimate
from .models_source import DEFAULT_SEQ_LEN, trace_model
from .backends import BackendError
from .calibration.campaign import CHUNK, REPEATS, ROUNDS, STOP_AFTER_FAILURES, CampaignStopped
from .calibration.budget import REFERENCES
from .calibration.store import StoreError
from .calibration.sweep import sweep_names
from .fleet.cluster import FleetError
from .measure import Protocol
from .measure.arguments import BOARD_OTHERWISE, add_protocol_arguments, fill_defaults, protocol_from, \
    whole_network_protocol
from .measure.networks import NETWORK_PROTOCOL
from .profiles import ProfileError, builtin_names, load_profile


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"input shape must be integers like 1,3,224,224, got {text!r}") from None
    if not shape or any(v <= 0 for v in shape):
        raise argparse.ArgumentTypeError(f"input shape must be positive integers, got {text!r}")
    return shape


def _shapes(text: str) -> list[tuple[int, ...]]:
    """One shape per input, separated by ';' (``1,128;1,128``)."""
    return [_shape(part.strip()) for part in text.split(";")]


def _dtypes(text: str) -> list[torch.dtype]:
    """One dtype for every input, or one per input separated by ';' (``int64;float32``)."""
    dtypes = []
    for name in (part.strip() for part in text.replace(",", ";").split(";")):
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise argparse.ArgumentTypeError(f"unknown dtype {name!r}; e.g. float32, float16, bfloat16, int64, "
                                             f"int32, bool")
        dtypes.append(dtype)
    return dtypes


def _summary(report: pd.DataFrame, graph: LayerGraph) -> dict:
    """GMACs, parameters and the share of the kernel time answered by fallback models
    (the profile's ``default`` entry, because it has no model for the kernel's kind)."""
    ran = report["layer_model"] != "free"
    fallback = ran & (report["profile_entry"] == "default")
    kernel_ms = float(report.loc[ran, "time_ms"].sum())
    if graph.parameter_sizes is not None:
        parameters = int(sum(graph.parameter_sizes))
    else:                                            # an ONNX file: the weights its layers hold
        parameters = int(sum(layer.counts.stored_weight_elems for layer in graph))
    return {"gmacs": graph.total("ops", kinds=PRODUCT_KINDS) / 2e9, "parameters": parameters,
            "fallback_share": float(report.loc[fallback, "time_ms"].sum()) / kernel_ms if kernel_ms > 0 else 0.0,
            "fallback_kinds": sorted(set(report.loc[fallback, "kind"]))}


def _count(n: int) -> str:
    """``11.69 M``, ``82.0 k``, ``512``."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return str(n)


def _print_report(report: pd.DataFrame, full: bool, summary: dict) -> None:
    table = report[["kernel", "kind", "layers", "ops", "time_ms", "layer_model", "profile_entry", "bound"]].copy()
    table["layers"] = [s if len(s) <= 48 else s[:45] + "..." for s in table["layers"]]
    table["ops"] = [f"{v / 1e6:,.2f}M" for v in table["ops"]]
    table["time_ms"] = [f"{v:.4f}" for v in table["time_ms"]]
    if not full:
        table = table[report["bound"] != "free"]
    with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_colwidth", 50):
        print(table.to_string(index=False))
    kinds = report.groupby("kind")["time_ms"].sum().sort_values(ascending=False)
    print("\ntime by kernel kind: " + ", ".join(f"{k} {v:.3f} ms" for k, v in kinds.head(8).items()))
    free = int((report["bound"] == "free").sum())
    print(f"{len(report)} kernels ({free} free views/identities{' hidden' if not full and free else ''}); "
          f"overhead {report.attrs['overhead_ms']:.3f} ms")
    print(f"total: {report.attrs['total_ms']:.3f} ms  ({report.attrs['model']} on {report.attrs['profile']})")
    print(f"{summary['gmacs']:.4g} GMACs, {_count(summary['parameters'])} parameters{_weights_note(report)}")
    print(confidence_line(report))


def _weights_note(report: pd.DataFrame) -> str:
    """Where the network's weights come from at each inference, when the profile knows
    how large a network keeps them cached ("" otherwise)."""
    cache = report.attrs.get("weight_cache_bytes")
    if cache is None:
        return ""
    size = f"{report.attrs['weight_bytes'] / 2 ** 20:.1f} MiB of weights"
    if report.attrs["weights_from_memory"]:
        return f"; {size}, read from memory at each inference (more than the {cache / 2 ** 20:.1f} MiB that stay cached)"
    return f"; {size}, cached between inferences (up to {cache / 2 ** 20:.1f} MiB stay cached)"


def confidence_line(report: pd.DataFrame, kinds_shown: int = 4) -> str:
    """One line on what the estimate of ``report`` vouches for: the kernels (and their share
    of the kernel time) outside the calibrated range, naming kinds and features, those a
    fallback answered, and those whose models have no recorded range."""
    time = report["time_ms"]
    total = float(time.sum()) or 1.0
    executed = report["confidence"] != "free"

    def count(mask) -> str:
        return f"{int(mask.sum())} kernel{'s' if mask.sum() != 1 else ''}"

    parts = []
    measured = report["confidence"] == "measured"
    if measured.any():
        parts.append(f"{count(measured)} ({100 * time[measured].sum() / total:.0f} %) measured on this machine")
    outside = report["confidence"] == "extrapolated"
    if outside.any():
        spans: dict[str, dict[str, list[float]]] = {}
        for kind in time[outside].groupby(report["kind"][outside]).sum().sort_values(ascending=False).index:
            for text in report.loc[outside & (report["kind"] == kind), "outside_range"]:
                for feature, value in re.findall(r"(\w+)=(\S+) \(", text):
                    spans.setdefault(kind, {}).setdefault(feature, []).append(float(value))
        listed = [f"{kind} ({', '.join(f'{f}={min(v):g}' + (f'..{max(v):g}' if max(v) > min(v) else '') for f, v in features.items())})"
                  for kind, features in spans.items()]
        more = ", ..." if len(listed) > kinds_shown else ""
        parts.append(f"{count(outside)}, {100 * time[outside].sum() / total:.0f} % of the time, outside the "
                     f"calibrated range: {', '.join(listed[:kinds_shown])}{more}")
    for label, what in (("fallback", "by fallback"), ("unranged", "by models with no recorded calibrated range")):
        mask = report["confidence"] == label
        if mask.any():
            kinds = time[mask].groupby(report["kind"][mask]).sum().sort_values(ascending=False).index
            named = f": {', '.join(kinds[:kinds_shown])}{', ...' if len(kinds) > kinds_shown else ''}" \
                if label == "fallback" else ""
            parts.append(f"{count(mask)} ({100 * time[mask].sum() / total:.0f} %) {what}{named}")
    if not parts:
        return f"all {count(executed)} inside their calibrated ranges"
    inside = report["confidence"] == "calibrated"
    return "; ".join(parts) + (f"; {count(inside)} inside their calibrated ranges" if inside.any() else "")


def cmd_estimate(args: argparse.Namespace) -> int:
    shapes = [shape for group in args.input_shape or () for shape in group] or None
    dtypes = [dtype for group in args.input_dtype or () for dtype in group] or None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator = Estimator(args.profile, model_type=args.model_type, use_mapping=not args.no_mapping,
                              measured=args.measured)
        training = estimator.profile.training is not None    # a training profile estimates training passes
        target = trace_model(args.model, shapes, dtypes, args.seq_len, args.example_inputs, training)
        report = estimator.report(target)
    summary = _summary(report, target)
    optimizer_ms = estimator.optimizer_step(target, args.optimizer) if training else None
    memory = _memory(estimator, target, args.memory, args.optimizer) if args.memory else None
    say = (lambda text: print(text, file=sys.stderr)) if args.json else print   # --json: stdout is the JSON only
    if args.json:
        print(json.dumps(_as_json(report, summary, optimizer_ms, memory, caught), indent=1))
    else:
        _print_report(report, args.all, summary)
        if optimizer_ms is not None:
            print(f"training step with {args.optimizer}: {report.attrs['total_ms']:.3f} ms forward + backward "
                  f"+ {optimizer_ms:.3f} ms optimizer step = {report.attrs['total_ms'] + optimizer_ms:.3f} ms")
        if memory is not None:
            _print_memory(memory)
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    if args.csv:
        with atomic_path(args.csv) as tmp:
            report.to_csv(tmp, index=False)
        say(f"wrote {args.csv}")
    if args.plot:
        from .plotting import plot_report
        say(f"wrote {plot_report(report, estimator.profile, args.plot)}")
    return 0


def _as_json(report: pd.DataFrame, summary: dict, optimizer_ms: float | None, memory: MemoryEstimate | None,
             caught: list) -> dict:
    """What ``estimate --json`` prints: the totals, the summary, one object per kernel
    (the report's columns) and the warnings."""
    result = {"model": report.attrs["model"], "profile": report.attrs["profile"],
              "total_ms": report.attrs["total_ms"], "overhead_ms": report.attrs["overhead_ms"], **summary}
    if optimizer_ms is not None:
        result["optimizer_step_ms"] = optimizer_ms
        result["training_step_ms"] = report.attrs["total_ms"] + optimizer_ms
    if memory is not None:
        result["memory"] = {"training": memory.training, "optimizer": memory.optimizer,
                            "total_bytes": memory.total_bytes, "params_bytes": memory.params_bytes,
                            "activation_peak_bytes": memory.activation_peak_bytes,
                            "workspace_bytes": memory.workspace_bytes, "grads_bytes": memory.grads_bytes,
                            "optimizer_bytes": memory.optimizer_bytes}
    result["kernels"] = json.loads(report.to_json(orient="records"))
    result["warnings"] = [str(warning.message) for warning in caught]
    return result


def _memory(estimator: Estimator, target: LayerGraph, mode: str, optimizer: str) -> MemoryEstimate:
    """One step's memory estimate for ``estimate --memory MODE``."""
    training = mode == "training" or (mode == "auto" and estimator.profile.training is not None)
    return estimator.memory(target, training=training, optimizer=optimizer)


def _print_memory(memory: MemoryEstimate) -> None:
    """The memory section of ``estimate --memory``: one step's estimated peak and its parts."""
    training, optimizer = memory.training, memory.optimizer
    mib = 2 ** 20
    parts = [f"parameters {memory.params_bytes / mib:.1f}",
             f"{'saved activations' if training else 'activation peak'} {memory.activation_peak_bytes / mib:.1f}"]
    if training:
        parts += [f"gradients {memory.grads_bytes / mib:.1f}", f"{optimizer} state {memory.optimizer_bytes / mib:.1f}"]
    print(f"memory ({'training step with ' + optimizer if training else 'inference'}): peak {memory.total_mb:.1f} MiB "
          f"({', '.join(parts)} MiB; im2col workspace up to {memory.workspace_bytes / mib:.1f} MiB, not added)")


def cmd_profiles(args: argparse.Namespace) -> int:
    for name in builtin_names():
        profile = load_profile(name)
        fp = profile.fingerprint
        default = " (default)" if name == DEFAULT_PROFILE else ""
        print(f"{name}{default}: {profile.description}")
        print(f"    backend={fp['backend']} device={fp['device']!r} runtime={fp['runtime_version']!r} "
              f"threads={fp['threads']} precision={fp['precision']}")
        for type_name, models in profile.layer_models.items():
            print(f"    {type_name}: {', '.join(models)}")
        print(f"    preference: {' > '.join(profile.model_preference)}; {len(profile.mapping)} fusion rules; "
              f"overhead {profile.overhead_ms:g} ms")
    return 0


def _print_machine(threads: int) -> None:
    """The busy-machine check before long work: steal, busy CPUs, load; warnings on stderr."""
    from .measure import machine_state

    state = machine_state(threads=threads)
    print(f"machine: {state}")
    for warning in state.warnings:
        print(f"warning: this machine is too busy for reproducible timings: {warning}", file=sys.stderr)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .calibration import dry_run_campaign, run_campaign

    if not args.out and not args.dry_run:
        raise ValueError("calibrate needs --out DIR (where the measurements go)")
    table = args.models is not None and not (args.prior or args.minutes)   # --for's kernel table, not a campaign
    fill_defaults(args, FOR_PROTOCOL if table else CALIBRATION_PROTOCOL)
    if args.method != "profile" and not table:
        raise ValueError("--method applies to calibrate --for MODEL ..., not to a campaign")
    if args.compile != "each-round" and args.method != "end-to-end":
        raise ValueError("--compile applies to calibrate --for --method end-to-end (whole networks); a campaign "
                         "and the profiling of --for compile anew each round")
    if args.across_rounds != "pool" and not table:
        raise ValueError("--across-rounds applies to calibrate --for (whole networks); a campaign pools the rounds")
    if args.weight_rereads:
        if args.sweep or args.models or args.minutes or args.ray or args.dry_run:
            raise ValueError("--weight-rereads measures networks into a store on its own; leave out --sweep, --for, "
                             "--minutes, --ray and --dry-run")
        return _calibrate_rereads(args)
    if args.prior or (args.minutes and args.sweep is None):
        return _calibrate_budget(args)
    if (args.sweep is None) == (args.models is None):
        raise ValueError("calibrate needs --sweep (a calibration campaign), --for MODEL ... (the kernels of those "
                         "networks) or --minutes M [--prior PROFILE] (a budgeted campaign that starts from a profile)")
    if args.models is not None:
        if args.dry_run or args.retry_failed or args.ray:
            raise ValueError("--dry-run, --retry-failed and --ray apply to a --sweep campaign, not to --for")
        return _calibrate_for(args)
    options = {"config": args.config} if args.config else {}
    if args.ray:
        return _calibrate_fleet(args, options)
    if args.dry_run:
        for spec, commands in dry_run_campaign(args.backend, args.sweep, threads=args.threads,
                                               precision=args.precision, warmup=args.warmup,
                                               repeats=args.repeats, backend_options=options):
            print(f"# {spec.id}: {spec.to_json()}")
            for command in commands:
                print(command)
        return 0

    print(f"calibrating {args.backend} ({args.threads} thread(s), {args.precision or 'default precision'}) "
          f"with sweep {args.sweep!r} "
          f"into {args.out}" + (f", for at most {args.minutes:g} min" if args.minutes else ""))
    _print_machine(args.threads)
    summary = run_campaign(args.backend, args.sweep, args.out, threads=args.threads, precision=args.precision,
                           minutes=args.minutes, timeout_s=args.timeout, warmup=args.warmup, repeats=args.repeats,
                           backend_options=options, retry_failed=args.retry_failed, rounds=args.rounds,
                           statistic=args.statistic, drift=args.drift,
                           stop_after_failures=args.stop_after_failures)
    print(summary)
    if summary.machine is not None:
        for warning in summary.machine.warnings:
            print(f"warning: while measuring: {warning}", file=sys.stderr)
    if summary.stopped_early:
        print("time limit reached; run the same command again to continue where this run stopped")
    return 0


def _calibrate_fleet(args: argparse.Namespace, options: dict) -> int:
    """``calibrate --sweep S --ray ADDRESS``: the campaign on a Ray cluster's nodes, or with
    ``--dry-run`` which node would measure what."""
    from .fleet import plan_fleet_campaign, run_fleet_campaign

    common = dict(resource=args.ray_resource, threads=args.threads, precision=args.precision, backend_options=options,
                  retry_failed=args.retry_failed, chunk=args.ray_chunk)
    if args.dry_run:
        for plan in plan_fleet_campaign(args.backend, args.sweep, args.out or ".", args.ray, **common):
            print(plan)
        return 0
    print(f"calibrating {args.backend} ({args.threads} thread(s), {args.precision or 'default precision'}) "
          f"with sweep {args.sweep!r} into {args.out} on the Ray cluster {args.ray!r}, nodes advertising "
          f"{args.ray_resource or args.backend!r}" + (f", for at most {args.minutes:g} min" if args.minutes else ""))
    summaries = run_fleet_campaign(args.backend, args.sweep, args.out, args.ray, minutes=args.minutes,
                                   timeout_s=args.timeout, warmup=args.warmup, repeats=args.repeats,
                                   rounds=args.rounds, statistic=args.statistic,
                                   drift=args.drift, **common)
    for summary in summaries:
        print(summary)
    if any(s.benchmarks > s.already_done + s.measured + s.failed for s in summaries):
        print("benchmarks left; run the same command again to continue where this run stopped")
    return 0


def _calibrate_budget(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .calibration.budget import run_budgeted_campaign

    if args.dry_run or args.retry_failed:
        raise ValueError("--dry-run and --retry-failed apply to a fixed --sweep campaign, not to a budgeted one")
    if not args.minutes:
        raise ValueError("a budgeted campaign (--prior) needs --minutes M, its budget")
    options = {"config": args.config} if args.config else {}
    backend = get_backend(args.backend, threads=args.threads, precision=args.precision, **options)
    protocol = protocol_from(args, backend, CALIBRATION_PROTOCOL)
    pool = args.sweep or "full"
    print(f"budgeted campaign on {args.backend} ({args.threads} thread(s), {backend.precision}) for {args.minutes:g} "
          f"min from prior {args.prior or 'the built-in profile of the backend'}, benchmarks of sweep {pool!r}"
          + (f", weighted by the kinds of {', '.join(args.models)}" if args.models else "") + f"; {protocol}")
    _print_machine(args.threads)
    summary = run_budgeted_campaign(args.backend, args.out, args.minutes, prior=args.prior, pool=pool,
                                    models=args.models or (), threads=args.threads, precision=args.precision,
                                    timeout_s=args.timeout, warmup=protocol.warmup, repeats=protocol.repeats,
                                    rounds=protocol.rounds, statistic=protocol.statistic, drift=protocol.drift,
                                    backend_options=options, references=args.references)
    print(summary)
    return 0


def _calibrate_for(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .calibration.in_context import calibrate_for

    options = {"config": args.config} if args.config else {}
    backend = get_backend(args.backend, threads=args.threads, precision=args.precision, **options)
    protocol = protocol_from(args, backend, CALIBRATION_PROTOCOL)
    how = "in context" if args.method == "profile" else "end to end, to fit their kernels"
    print(f"measuring {len(args.models)} network(s) on {args.backend} {how}: {protocol}")
    summary = calibrate_for(args.models, args.backend, args.out, profile=args.profile, threads=args.threads,
                            precision=args.precision, protocol=protocol, input_shape=args.input_shape,
                            backend_options=options, method=args.method)
    if summary.machine:
        print(summary.machine)
    if summary.fit is not None:
        print(summary.fit)
        if abs(math.log(summary.fit.scale)) > math.log(1.1):
            print(f"note: the profile's estimates are x{summary.fit.scale:.2f} off on these networks; with this "
                  f"table the estimator scales the kernels it lacks by that, without it they stay off. Adapt the "
                  f"profile to this machine for those estimates (annette-torch adapt --from "
                  f"{args.profile or 'PROFILE'} --backend {args.backend} --samples 10 --out here.json)")
    for result in summary.results:
        print(result)
    for name in summary.skipped:
        print(f"{name}: not measured, its kernels are in the table or in a network measured before it")
    for name, message in summary.failures.items():
        print(f"{name}: failed: {message}", file=sys.stderr)
    print(f"table: {summary.folder}; estimate with --measured {summary.folder} "
          f"(Estimator(profile, measured='{summary.folder}'))")
    return 1 if summary.failures and not summary.results else 0


def _calibrate_rereads(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .backends import get_backend
    from .calibration.in_context import profile_for
    from .calibration.store import fingerprint_folder
    from .calibration.weight_rereads import PASSES, measure_weight_rereads, save_rereads

    backend = get_backend(args.backend, threads=args.threads, precision=args.precision)
    folder = Path(args.out) / fingerprint_folder(backend.fingerprint())
    if not (folder / "fingerprint.json").is_file():
        raise ValueError(f"{folder} is not a store of this machine's {args.backend}: measure a sweep into it first "
                         f"(calibrate --backend {args.backend} --sweep quick --out {args.out})")
    profile = args.profile or profile_for(backend)
    print(f"profiling {len(args.weight_rereads)} network(s) per layer on {args.backend}, {args.warmup} warm-up and "
          f"{args.repeats} profiled inferences, {PASSES} times; estimates of {profile}")
    _print_machine(args.threads)
    summary = measure_weight_rereads(backend, profile, args.weight_rereads, warmup=args.warmup, repeats=args.repeats)
    for row in summary["networks"]:
        print(f"{row['network']}: {row['kernels']} kernels with weights, measured x{row['level']:.3f} of the estimates "
              f"besides the re-reads")
    path = save_rereads(folder, summary)
    print(f"all: {summary['kernels']} kernels: weights re-read at "
          f"{summary['bytes_s'] / 1e9:.1f} GB/s, up to {summary['up_to_bytes'] / 2 ** 20:g} MiB per kernel; wrote {path}; "
          f"annette-torch fit --data {folder} gives the profile these re-reads")
    return 0


def cmd_noise(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .measure.noise import NOISE_PROTOCOL, measure_noise

    backend = get_backend(args.backend, threads=args.threads, precision=args.precision)
    protocol = protocol_from(args, backend, NOISE_PROTOCOL)
    print(measure_noise(backend, protocol, args.minutes))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .profiles.fingerprint import adapt_command, is_local
    from .transfer.adapt import check_profile

    profile = load_profile(args.profile)
    fp = profile.fingerprint
    if not is_local(profile):
        raise ValueError(f"check measures the profile's runtime on this machine; profile {profile.name!r} is of "
                         f"{fp.get('backend')!r}, not a runtime of this machine's CPU")
    backend = get_backend(fp["backend"], threads=fp.get("threads", 1), precision=fp.get("precision"))
    result = check_profile(profile, backend, args.samples, args.seed, whole_network_protocol(args, backend))
    print(result)
    if result.mean_abs_error * 100 <= args.tolerance:
        print(f"profile {profile.name!r} holds on this machine now (within {args.tolerance:g} %)")
        return 0
    print(f"profile {profile.name!r} is off on this machine now (mean |error| {100 * result.mean_abs_error:.1f} % > "
          f"{args.tolerance:g} %); adapt it: {adapt_command(profile, args.profile)}")
    return 1


def cmd_stores(args: argparse.Namespace) -> int:
    from .calibration.store import MeasurementStore, load_measurements, store_folders, summarize, summarize_families

    folders = store_folders(args.root)
    if not folders:
        raise ValueError(f"no measurement stores (folders with fingerprint.json) at or under {args.root}")
    from .calibration.generator import FAMILIES
    unknown = sorted(set(args.drop_family or ()) - set(FAMILIES))
    if unknown:
        raise ValueError(f"--drop-family: no benchmark family {', '.join(unknown)}; families: {', '.join(sorted(FAMILIES))}")
    if args.drop_family or args.compact:
        for folder in folders:
            fingerprint, _, _ = load_measurements(folder)
            with MeasurementStore.open(folder.parent, fingerprint) as store:
                for family in args.drop_family or ():
                    print(f"dropped {store.drop_family(family)} {family} benchmarks from {folder}")
                if args.compact:
                    store.compact()
                    print(f"compacted {folder}")
    table = pd.DataFrame([summarize(folder) for folder in folders]).drop(columns="store")
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
        if args.by_family:
            for folder in folders:
                print(f"\n{folder.name}")
                print(summarize_families(folder).to_string(index=False))
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .calibration.store import store_folders
    from .fit import fit_profile, format_report
    from .profiles.fingerprint import adapt_command, is_local
    from .transfer.adapt import anchor_fit_or_prior, anchor_on_references, print_fit, stored_references
    from .transfer.fewshot import correction_terms

    terms = None if args.anchor_terms is None else correction_terms(args.anchor_terms)
    folders = store_folders(args.data)
    if not folders:
        raise ValueError(f"no measurement stores (folders with fingerprint.json) at or under {args.data}")
    if args.prior and args.with_statistical:
        raise ValueError("--with-statistical applies to a fit from scratch; --prior keeps the prior's model sets")
    if args.name and len(folders) > 1:
        raise ValueError(f"--name names one profile, but {args.data} holds {len(folders)} stores; pass one store folder")
    for folder in folders:
        if args.prior:
            from .fit.prior import fit_prior_corrected, format_prior_report
            print(f"fitting {folder} as corrections of {args.prior}")
            profile = fit_prior_corrected(folder, args.prior, name=args.name, seed=args.seed,
                                          test_share=args.test_share, first=args.first, sample=args.sample,
                                          progress=True)
            print(format_prior_report(profile.fit_metrics))
        else:
            print(f"fitting {folder}")
            profile = fit_profile(folder, name=args.name, seed=args.seed, test_share=args.test_share,
                                  first=args.first, sample=args.sample, progress=True,
                                  with_statistical=args.with_statistical)
            print(format_report(profile.fit_metrics))
        references = [] if args.no_anchor else stored_references(folder)
        if references:
            print(f"anchoring on the {len(references)} reference networks of {folder}/references.csv "
                  f"(whole networks, which small benchmarks may not predict; --no-anchor keeps the fit as it is)")
            if args.prior:
                anchored, source, scores = anchor_fit_or_prior(profile, load_profile(args.prior), references,
                                                               seed=args.seed, terms=terms)
                if None not in scores.values():
                    print(f"leave-one-out mean |log error| on the references, anchored: the fit {scores['fit']:.3f}, "
                          f"the prior {scores['prior']:.3f}; keeping "
                          + ("the fit" if source is profile else f"the prior ({args.prior}), anchored"))
            else:
                anchored = anchor_on_references(profile, references, seed=args.seed, terms=terms)
                source = profile
            print_fit(anchored, source, references)
            profile = anchored
        path = profile.save(Path(args.out) / f"{profile.name}.json")
        print(f"wrote {path}")
        if is_local(profile) and not references:
            print(f"next: check it on whole networks of this machine, which small calibration benchmarks may not "
                  f"predict (20 % apart on one CPU, docs/cross-cpu.md): {adapt_command(profile, str(path))} "
                  f"(measures 10 reference networks, about a minute; prints the profile's error on them and "
                  f"corrects it; a budgeted campaign, calibrate --minutes, measures them into the store and fit "
                  f"then does this itself)")
        print()
    return 0


def cmd_adapt(args: argparse.Namespace) -> int:
    from .transfer import adapt as transfer_adapt

    sources = args.source.split(",") if args.source else None
    if args.descriptor:
        if args.backend or args.samples is not None or args.ray:
            raise ValueError("--descriptor builds a zero-shot profile and measures nothing; "
                             "leave out --backend, --samples and --ray")
        profile = transfer_adapt.zero_shot(args.descriptor, sources, args.name)
    else:
        if not (args.backend and sources and args.samples is not None):
            raise ValueError("adapt needs --from, --backend and --samples (or --descriptor for a zero-shot profile)")
        from .backends import get_backend
        protocol = whole_network_protocol(args, get_backend(args.backend, threads=args.threads,
                                                            precision=args.precision))
        profile = transfer_adapt.few_shot(sources, args.backend, args.threads, args.precision, args.samples, args.seed,
                                          args.name, protocol, args.mapping, args.ray, args.ray_resource)
    print(f"wrote {profile.save(args.out)}")
    return 0


#: calibration's protocol defaults (:data:`~annette_torch.calibration.campaign.ROUNDS`, ``REPEATS``)
CALIBRATION_PROTOCOL = Protocol(rounds=ROUNDS, warmup=5, repeats=REPEATS)
#: ``calibrate --for``'s: the accuracy benchmark's ground-truth protocol, whose end-to-end times its tables are
#: scaled to (2 rounds pooled left the tables 12-14 % off on NAS-Bench-201 cells, docs/cross-cpu.md 2026-12-05 night)
FOR_PROTOCOL = Protocol(rounds=12, warmup=5, repeats=REPEATS, drift="canary", across_rounds="median")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """``--ray ADDRESS`` and ``--ray-resource NAME`` (:mod:`annette_torch.fleet`, extra ``[fleet]``)."""
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="measure on the nodes of a Ray cluster that advertise the device (pip install "
                             "'annette_torch[fleet]'): auto (the running cluster), local (start one on this machine), "
                             "or HOST:PORT; see calibration/README.md")
    parser.add_argument("--ray-resource", metavar="NAME",
                        help="with --ray: the custom resource the device's nodes advertise (default: the backend's "
                             "name, e.g. ray start --resources '{\"zcu102\": 1}')")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="annette-torch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"annette_torch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    est = sub.add_parser("estimate", help="estimate one model and print the per-kernel table")
    est.add_argument("model", help="torchvision:NAME (any task), timm:NAME, hf:CONFIG_OR_MODEL_CLASS (hf:BertConfig, "
                                   "hf:GPT2LMHeadModel), hf:path/to/config.json, path/to/file.py:factory, or "
                                   "model.onnx; built with random weights, nothing downloaded")
    est.add_argument("--profile", default=DEFAULT_PROFILE, help=f"profile name or .json path (default {DEFAULT_PROFILE})")
    est.add_argument("--input-shape", type=_shapes, action="append",
                     help="e.g. 1,3,224,224 (default: the model's own); several inputs: repeat the option or "
                          "separate the shapes by ';' (1,128;1,128)")
    est.add_argument("--input-dtype", type=_dtypes, action="append",
                     help="dtype of the inputs (default: the model's own, float32 or int64 token ids), e.g. int64 "
                          "for token ids; one for all inputs or one per input")
    est.add_argument("--seq-len", type=_positive_int,
                     help=f"sequence length of a text model's token ids (default: {DEFAULT_SEQ_LEN})")
    est.add_argument("--example-inputs", metavar="FILE.py:FUNCTION",
                     help="the inputs a function returns (a tensor, a tuple of positional arguments, or a dict by "
                          "name), for anything the shape options cannot say")
    est.add_argument("--json", action="store_true",
                     help="print the estimate as JSON (total, GMACs, parameters, fallback share, one object per "
                          "kernel, warnings) instead of the table")
    est.add_argument("--csv", help="write the per-kernel table to this CSV file")
    est.add_argument("--plot", help="write a time-breakdown and roofline chart to this PNG file")
    est.add_argument("--model-type", help="use this layer-model type (e.g. roofline) instead of the profile's preference")
    est.add_argument("--no-mapping", action="store_true", help="skip the fusion rules (each layer is a kernel)")
    est.add_argument("--all", action="store_true", help="also list free kernels (views, identity, dropout)")
    est.add_argument("--measured", help="a table of kernels measured on this machine (calibrate --for): its kernels "
                                        "take their measured times")
    est.add_argument("--memory", nargs="?", const="auto", choices=("auto", "inference", "training"),
                     help="also print the memory estimate (Augur): inference, or a training step "
                          "(default: training with a training profile, else inference)")
    est.add_argument("--optimizer", default="sgd",
                     help="the optimizer of a training step (sgd, momentum, adam): its time with a training profile "
                          "(torch-cpu-train), its state with --memory training")
    est.set_defaults(func=cmd_estimate)
    prof = sub.add_parser("profiles", help="list the built-in profiles with their fingerprints")
    prof.set_defaults(func=cmd_profiles)
    from .backends import available_backends
    cal = sub.add_parser("calibrate", help="measure a sweep of benchmark networks on a runtime into a store, or "
                                           "the kernels of given networks (--for) into a table the estimator uses")
    cal.add_argument("--backend", required=True, choices=available_backends())
    cal.add_argument("--sweep",
                     help=f"a shipped sweep ({', '.join(sweep_names())}; package data in "
                          "annette_torch/calibration/sweeps) or the path of a sweep CSV file")
    cal.add_argument("--for", dest="models", nargs="+", metavar="MODEL",
                     help="measure the distinct kernels of these networks (as estimate takes them: torchvision:NAME, "
                          "timm:NAME, file.py:function, model.onnx) in context, each once, into a table under --out")
    cal.add_argument("--weight-rereads", nargs="+", metavar="MODEL",
                     help="profile these networks per layer and measure what re-reading the weights a one-layer "
                          "benchmark kept cached costs in them, into the store under --out (weight_rereads.json; "
                          "fit gives the profile that term); networks you will not score the profile on")
    cal.add_argument("--profile", help="with --for or --weight-rereads: the profile whose kernels the table is keyed "
                                       "by, or whose estimates the re-reads are fitted against (default: the "
                                       "built-in profile of the backend, threads and precision)")
    cal.add_argument("--input-shape", type=_shape, help="with --for: the networks' input shape (default: their own)")
    cal.add_argument("--method", choices=("profile", "end-to-end"), default="profile",
                     help="with --for: profile the networks' kernels in context (default), or time the networks "
                          "whole and fit their kernels to those times and to the networks timed into the table "
                          "before (end-to-end: no profiler, better for unseen networks of the same search space)")
    cal.add_argument("--out", help="store root (or with --for, table root); a folder per backend fingerprint")
    cal.add_argument("--config",
                     help="backend configuration file (boards: a copy of the shipped example "
                          "annette_torch/backends/boards/<board>.example.toml; without --config the error "
                          "names where it is installed)")
    cal.add_argument("--dry-run", action="store_true",
                     help="print the commands each benchmark would run (board backends) and run nothing")
    cal.add_argument("--threads", type=_positive_int, default=1, help="threads the runtime may use (default 1)")
    cal.add_argument("--precision", help="arithmetic precision (default: the backend's own, f32 for the CPU "
                                          "runtimes, int8 for zcu102, f16 for ncs2)")
    cal.add_argument("--minutes", type=float,
                     help="stop after this many minutes (rerun to resume); without --sweep, or with --prior: the "
                          "budget of a campaign that measures where the prior profile is worst")
    cal.add_argument("--prior", help="a budgeted campaign: the profile (name or .json) whose errors on this machine "
                                     "steer it (default with --minutes and no --sweep: the built-in profile of the "
                                     "backend); --sweep is then the pool (default full), --for weighs it by those "
                                     "networks' kernel kinds")
    cal.add_argument("--references", type=int, default=REFERENCES, metavar="K",
                     help=f"a budgeted campaign first measures K whole reference networks (as adapt draws them; "
                          f"about a minute), once per store, and fit anchors the profile on them (default "
                          f"{REFERENCES}, 0: none)")
    cal.add_argument("--timeout", type=float,
                     help="seconds before a benchmark's round counts as hung (default: the backend's, 120 for the "
                          "CPU runtimes)")
    cal.add_argument("--retry-failed", action="store_true",
                     help="measure again the benchmarks whose last attempt failed (e.g. the board was down)")
    cal.add_argument("--stop-after-failures", type=int, default=STOP_AFTER_FAILURES, metavar="K",
                     help=f"stop, recording none of them, when K benchmarks in a row fail with the same error "
                          f"(a setting such as --timeout, not the benchmarks; default {STOP_AFTER_FAILURES}, 0: never)")
    _add_fleet_arguments(cal)
    cal.add_argument("--ray-chunk", type=_positive_int, default=CHUNK,
                     help=f"with --ray: benchmarks per Ray task, measured in interleaved rounds on one node "
                          f"(default {CHUNK})")
    add_protocol_arguments(cal, CALIBRATION_PROTOCOL, otherwise=("--for", FOR_PROTOCOL))
    cal.set_defaults(func=cmd_calibrate)
    noise = sub.add_parser("noise", help="how reproducible timings are on this machine now: small networks in "
                                         "interleaved rounds, round-to-round differences, steal and load")
    noise.add_argument("--backend", required=True, choices=available_backends())
    noise.add_argument("--threads", type=_positive_int, default=1, help="threads the runtime may use (default 1)")
    noise.add_argument("--precision", help="arithmetic precision (default: the backend's own)")
    noise.add_argument("--minutes", type=float, help="keep adding rounds for this many minutes")
    from .measure.noise import NOISE_PROTOCOL
    add_protocol_arguments(noise, NOISE_PROTOCOL)
    noise.set_defaults(func=cmd_noise)
    check = sub.add_parser("check", help="is a profile still right on this machine now? measure a few reference "
                                         "networks of its runtime and compare (exit 1 when off by more than "
                                         "--tolerance)")
    check.add_argument("--profile", required=True, help="profile name or .json path (of a runtime of this machine)")
    check.add_argument("--samples", type=int, default=5, help="reference networks to measure (default 5)")
    check.add_argument("--seed", type=int, default=0, help="picks the reference networks (default 0)")
    check.add_argument("--tolerance", type=float, default=10.0,
                       help="mean |error| in percent above which the profile is off (default 10)")
    add_protocol_arguments(check, NETWORK_PROTOCOL, otherwise=BOARD_OTHERWISE)
    check.set_defaults(func=cmd_check)
    stores = sub.add_parser("stores", help="summarize the measurement stores under a folder")
    stores.add_argument("root", help="a store folder or a folder of stores (e.g. calibration/data)")
    stores.add_argument("--compact", action="store_true", help="first move each store's rows into its .csv.gz archives")
    stores.add_argument("--by-family", action="store_true", help="also a table per benchmark family of each store")
    stores.add_argument("--drop-family", action="append", metavar="FAMILY",
                        help="first remove that family's benchmarks from every store (repeatable), so that a "
                             "campaign measures them again after their generator changed")
    stores.set_defaults(func=cmd_stores)
    fit = sub.add_parser("fit", help="fit a profile (mapping rules, layer models, overhead) to a measurement store")
    fit.add_argument("--data", required=True, help="a store folder, or a folder of stores (one profile each)")
    fit.add_argument("--out", required=True,
                     help="folder for the profile(s), written as <name>.json and its arrays <name>.<digest>.npz")
    fit.add_argument("--name", help="profile name (default: the backend, with -<n>t for more than one thread)")
    fit.add_argument("--seed", type=int, default=0, help="seed of the held-out split and the learners (default 0)")
    fit.add_argument("--test-share", type=float, default=0.2,
                     help="share of benchmarks held out to score the models (default 0.2)")
    fit.add_argument("--first", type=_positive_int,
                     help="fit on the store's first N benchmarks only (the store as it was; stores are append-only)")
    fit.add_argument("--sample", type=_positive_int,
                     help="fit on N benchmarks drawn at random (seeded by --seed): the learning curve's subsamples")
    fit.add_argument("--with-statistical", action="store_true",
                     help="keep the statistical layer models (estimate --model-type statistical); by default they "
                          "are kept only where the model preference reaches them, which it does not when mixed "
                          "models cover the same kinds")
    fit.add_argument("--prior", help="a profile (name or .json path) to correct with the store's measurements "
                                     "instead of fitting from scratch: for few measurements (docs/prior.md)")
    anchor = fit.add_mutually_exclusive_group()
    anchor.add_argument("--no-anchor", action="store_true",
                        help="keep the fitted profile as the benchmarks make it: do not correct it on the store's "
                             "reference networks (references.csv, measured by a budgeted campaign)")
    anchor.add_argument("--anchor-terms", metavar="TERMS",
                        help="the form of the correction on the reference networks, '+'-joined terms such as "
                             "scale+exponent+per_kernel (default: chosen by leave-one-out, the simplest within "
                             "5 %% of the best)")
    fit.set_defaults(func=cmd_fit)
    adapt = sub.add_parser("adapt", help="adapt a profile to another device from a few measured networks "
                                         "(or from a device descriptor)")
    adapt.add_argument("--from", dest="source",
                       help="source profile name or .json path; several, comma-separated: the one that fits the "
                            "samples best is adapted (with --descriptor: the sources to pick the nearest from, "
                            "default all with a known descriptor)")
    adapt.add_argument("--backend", choices=available_backends(), help="the device's runtime, measured here")
    adapt.add_argument("--threads", type=_positive_int, default=1, help="threads the runtime may use (default 1)")
    adapt.add_argument("--precision", help="arithmetic precision (default: the backend's own)")
    adapt.add_argument("--samples", type=int, help="reference networks to measure (0 up to the reference pool's size, which an error names; "
                       "10 is a good start)")
    adapt.add_argument("--seed", type=int, default=0, help="picks the reference networks (default 0)")
    adapt.add_argument("--mapping", choices=("backend", "choose", "source", "unfused", "eager"), default="backend",
                       help="how the device maps layers to kernels: as the backend declares (default; "
                            "torch-cpu: eager, graph compilers: the source's fusion rules), chosen by "
                            "leave-one-out on the samples, or the source's / no fusion / no fusion and "
                            "no graph optimization")
    adapt.add_argument("--descriptor", help="device descriptor JSON: build a zero-shot profile, measure nothing")
    adapt.add_argument("--out", required=True, help="where to write the adapted profile (.json)")
    adapt.add_argument("--name", help="profile name (default: derived from the device and the source)")
    _add_fleet_arguments(adapt)
    add_protocol_arguments(adapt, NETWORK_PROTOCOL, otherwise=BOARD_OTHERWISE)
    adapt.set_defaults(func=cmd_adapt)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; exit code 0 on success, 2 for a usage error or bad input (argparse's
    code too), each printed as one ``annette-torch: error:`` line, and warnings as
    ``annette-torch: warning:`` lines."""
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _print_warning
        try:
            return args.func(args)
        except (TraceError, ProfileError, StoreError, BackendError, CampaignStopped, FleetError, ValueError,
                OSError) as error:
            print(f"annette-torch: error: {error}{_hint(error)}", file=sys.stderr)
            return 2


def _print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr (no source location: it is not the user's code)."""
    print(f"annette-torch: warning: {message}", file=sys.stderr)


def _hint(error: Exception) -> str:
    """What to do about an error the message alone does not say how to fix."""
    text = str(error)
    if "'indices'" in text and "FloatTensor" in text:
        return "\nThe model takes token ids: give --input-dtype int64 (e.g. --input-shape 1,128 --input-dtype int64)"
    if "that was not given" in text:
        return "\nGive one --input-shape per input (repeat it, or separate the shapes by ';': '1,3,224,224;1,10')"
    return ""


if __name__ == "__main__":
    sys.exit(main())

"""Does every torchvision model (all tasks) and a set of HuggingFace configurations build
offline and trace, and which of their kinds fall back?

Each spec goes through what ``annette-torch estimate`` does (``trace_model``: weights
``None``, built on the meta device first, the model's default inputs) with the network
blocked, then through the default profile's report. One row per model: the capture
method, layers, the layers of kind ``unknown`` (estimated by the roofline fallback) and
their ops, the kernel kinds the profile answers with its ``default`` entry (no model
for the kind) and their share of the kernel time, the build + trace time, and the error
if it failed. It ends with the models that failed and the kinds that fall back, counted
over models. Every model runs in a worker process with a time limit (see
``timm_coverage.py``). The exit status is 0 when every model traces.

    python benchmarks/zoo_coverage.py                          # every torchvision model and HF_MODELS
    python benchmarks/zoo_coverage.py --models torchvision:raft_small hf:BertConfig
    python benchmarks/zoo_coverage.py --csv zoo_coverage.csv --timeout 300
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings

from timm_coverage import Runner, run_all, write_csv

#: HuggingFace configurations (``hf:`` specs): encoders, decoders, encoder-decoders, vision
HF_MODELS: tuple[str, ...] = (
    "hf:BertConfig", "hf:DistilBertConfig", "hf:RobertaConfig", "hf:AlbertConfig", "hf:ElectraConfig",
    "hf:GPT2Config", "hf:GPT2LMHeadModel", "hf:OPTConfig", "hf:LlamaConfig", "hf:MistralConfig", "hf:Qwen2Config",
    "hf:T5Config", "hf:T5EncoderModel", "hf:BartConfig", "hf:WhisperForAudioClassification",
    "hf:ViTConfig", "hf:DeiTConfig", "hf:SwinConfig", "hf:ConvNextConfig", "hf:ResNetConfig",
)
COLUMNS = ("model", "method", "layers", "unknown", "unknown_ops", "default_kinds", "default_share", "seconds",
           "error")
STARTUP_TIMEOUT = 120.0


def _failed(name: str, reason: str) -> dict:
    return {"model": name, "method": "", "layers": 0, "unknown": 0, "unknown_ops": "", "default_kinds": "",
            "default_share": "", "seconds": 0.0, "error": reason}


def measure(spec: str) -> dict:
    """One table row for ``spec``."""
    from annette_torch import Estimator
    from annette_torch.graph.errors import first_line
    from annette_torch.models_source import trace_model

    start = time.perf_counter()
    try:
        graph = trace_model(spec)
    except Exception as error:  # noqa: BLE001 - reported in the table
        return _failed(spec, first_line(error, with_type=True)[:300])
    seconds = time.perf_counter() - start
    report = Estimator().report(graph)
    ran = report["layer_model"] != "free"
    fallback = ran & (report["profile_entry"] == "default")
    kernel_ms = report.loc[ran, "time_ms"].sum()
    ops = collections.Counter(layer.attrs.get("op", "?") for layer in graph.unknown_layers())
    return {"model": spec, "method": graph.method, "layers": len(graph), "unknown": sum(ops.values()),
            "unknown_ops": " ".join(f"{op}x{n}" for op, n in ops.most_common()),
            "default_kinds": " ".join(sorted(set(report.loc[fallback, "kind"]))),
            "default_share": f"{report.loc[fallback, 'time_ms'].sum() / kernel_ms:.3f}" if kernel_ms > 0 else "",
            "seconds": round(seconds, 2), "error": ""}


def _worker(conn) -> None:
    """Child process: block the network, import the libraries, say so, then answer specs."""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network access is blocked in this benchmark")

    socket.socket.connect = refuse
    socket.create_connection = refuse
    warnings.simplefilter("ignore")
    import torch
    import torchvision  # noqa: F401  (imported before the clock starts)

    import annette_torch  # noqa: F401
    torch.set_num_threads(1)
    conn.send("ready")
    while (spec := conn.recv()) is not None:
        conn.send(measure(spec))


def _all_specs(with_hf: bool) -> list[str]:
    import torchvision

    specs = [f"torchvision:{name}" for name in torchvision.models.list_models()]
    return specs + list(HF_MODELS) if with_hf else specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", help="model specs (default: every torchvision model and HF_MODELS)")
    parser.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model")
    args = parser.parse_args(argv)
    try:
        import transformers  # noqa: F401
        with_hf = True
    except ImportError:
        with_hf = False
        print("transformers is not installed: the hf: models are left out")
    specs = args.models or _all_specs(with_hf)

    widths = {"model": 44, "method": 10, "layers": 6, "unknown": 7, "unknown_ops": 36, "default_kinds": 40,
              "default_share": 13, "seconds": 7}
    print(" ".join(c.ljust(w) for c, w in widths.items()), "error", flush=True)
    runner = Runner(args.timeout, worker=_worker, failed=_failed)
    rows = run_all(runner, specs, lambda row: print(" ".join(str(row[c])[:w].ljust(w) for c, w in widths.items()),
                                                    row["error"], flush=True))
    if args.csv:
        write_csv(args.csv, rows, COLUMNS)

    failed = [r for r in rows if r["error"]]
    traced = [r for r in rows if not r["error"]]
    print(f"\n{len(traced)}/{len(rows)} models build offline and trace; "
          f"{sum(1 for r in traced if r['unknown'] == 0)} with no unknown kinds")
    for r in failed:
        print(f"  failed: {r['model']}: {r['error']}")
    unknown = collections.Counter(op.rsplit("x", 1)[0] for r in traced for op in r["unknown_ops"].split())
    print("unknown ops (roofline fallback), by models: "
          + (", ".join(f"{op} {n}" for op, n in unknown.most_common()) or "none"))
    defaults = collections.Counter(kind for r in traced for kind in r["default_kinds"].split())
    print("kinds the default profile answers with its 'default' entry, by models: "
          + (", ".join(f"{kind} {n}" for kind, n in defaults.most_common()) or "none"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""How much of timm does ``annette_torch.trace`` understand?

Builds the smallest variant of many timm families (``pretrained=False``, in eval mode;
on the meta device when the model can be built and traced there, else on the CPU),
traces each at its default input size and prints one row per model: the capture
method, the number of layers, the layers of kind ``unknown`` and the ops behind them,
the trace time, the ratio of counted product ops (conv, linear, matmul, attention, rnn)
to ``torch.utils.flop_counter`` on the same meta forward pass, and the error if tracing
failed. It ends with the share of models that
trace with no unknown kinds and, for the others, why.

Each model runs in a worker process with a time limit, so one pathological model can't
stall the run (a worker that runs over is killed and a new one started). Only the worker
imports torch and timm. The exit status is 0 when every model traces with no unknown kinds.

    python benchmarks/timm_coverage.py                      # all models below
    python benchmarks/timm_coverage.py --models resnet18 vit_tiny_patch16_224
    python benchmarks/timm_coverage.py --csv timm_coverage.csv --timeout 60
"""
from __future__ import annotations

import argparse
import collections
import csv
import multiprocessing as mp
import sys
import time
import warnings

#: The smallest variant of each family (one line per family group).
MODELS: tuple[str, ...] = (
    # ResNet and relatives
    "resnet18", "resnext26ts", "seresnet18", "ecaresnet26t", "skresnet18", "resnetv2_50",
    "resnetrs50", "res2net50_14w_8s", "res2next50", "resnest14d", "gcresnet33ts",
    "tresnet_m", "selecsls42b", "dla34", "dla60x_c", "senet154", "legacy_seresnet18",
    # RegNet, NFNet, CSP, VoVNet, HGNet, GENet
    "regnetx_002", "regnety_002", "regnetz_b16", "nf_resnet50", "dm_nfnet_f0", "eca_nfnet_l0",
    "cspresnet50", "cspresnext50", "cspdarknet53", "cspnext_tiny", "darknet53", "ese_vovnet19b_dw",
    "hgnet_tiny", "hgnetv2_b0", "gernet_s",
    # Classic CNNs
    "vgg11", "vgg11_bn", "densenet121", "dpn48b", "inception_v3", "inception_v4",
    "inception_resnet_v2", "legacy_xception", "xception41", "hrnet_w18_small", "repvgg_a0",
    "mobileone_s0",
    "nasnetalarge", "pnasnet5large",
    # Mobile CNNs and NAS
    "efficientnet_b0", "tf_efficientnetv2_b0", "efficientnetv2_rw_t", "mobilenetv2_050",
    "mobilenetv3_small_050", "mobilenetv4_conv_small", "mnasnet_small", "fbnetc_100",
    "spnasnet_100", "mixnet_s", "ghostnet_050", "ghostnetv2_100", "repghostnet_050",
    "rexnet_100", "rexnetr_100", "hardcorenas_a", "lcnet_050", "tinynet_e", "fasternet_t0",
    "starnet_s050", "repvit_m0_9", "lcnetv2_small", "cpubone_nano", "mobilenetv5_300m",
    # Modern CNNs
    "convnext_atto", "convnextv2_atto", "convmixer_768_32", "inception_next_tiny",
    "rdnet_tiny", "mambaout_femto",
    # Self-attention in CNNs
    "botnet26t_256", "halonet26t", "lambda_resnet26t", "sebotnet33ts_256", "haloregnetz_b",
    # Vision transformers
    "vit_tiny_patch16_224", "deit_tiny_patch16_224", "deit_tiny_distilled_patch16_224",
    "deit3_small_patch16_224", "flexivit_small", "vit_relpos_small_patch16_224",
    "vit_small_patch16_rope_224", "beit_base_patch16_224", "beitv2_base_patch16_224",
    "eva02_tiny_patch14_224", "cait_xxs24_224", "xcit_nano_12_p16_224", "convit_tiny",
    "pit_ti_224", "tnt_s_patch16_224", "volo_d1_224", "visformer_tiny", "crossvit_tiny_240",
    "samvit_base_patch16", "vitamin_small_224", "vit_tiny_r_s16_p8_224",
    "naflexvit_base_patch16_gap", "qwen3_vit_88m", "deepseek_vit_412m",
    # Hierarchical transformers
    "swin_tiny_patch4_window7_224", "swinv2_tiny_window8_256", "swinv2_cr_tiny_ns_224",
    "pvt_v2_b0", "twins_pcpvt_small", "twins_svt_small", "coat_lite_tiny", "coat_tiny",
    "nest_tiny", "davit_tiny", "focalnet_tiny_srf", "gcvit_xxtiny", "mvitv2_tiny",
    "hiera_tiny_224", "hieradet_small", "tiny_vit_5m_224", "nextvit_small", "iformer_s",
    # Hybrids (conv + attention)
    "levit_128s", "levit_conv_128s", "maxvit_nano_rw_256", "maxvit_tiny_tf_224",
    "coatnet_nano_rw_224", "coatnet_0_rw_224", "efficientformer_l1", "efficientformerv2_s0",
    "edgenext_xx_small", "mobilevit_xxs", "mobilevitv2_050", "fastvit_t8",
    "efficientvit_b0", "efficientvit_m0", "shvit_s1", "fastvit_mci0", "csatv2",
    "swiftformer_xs", "lowformer_b0", "efficientvim_m1",
    # MLPs and poolers
    "mixer_s16_224", "resmlp_12_224", "gmlp_ti16_224", "poolformer_s12", "poolformerv2_s12",
    "sequencer2d_s",
)

#: Seconds a new worker process may take to import torch, timm and annette_torch.
STARTUP_TIMEOUT = 120.0
COLUMNS = ("model", "device", "method", "layers", "unknown", "unknown_ops", "trace_s", "ops_vs_fc",
           "error")


def _failed(name: str, reason: str) -> dict:
    return {"model": name, "device": "", "method": "", "layers": 0, "unknown": 0,
            "unknown_ops": "", "trace_s": 0.0, "ops_vs_fc": "", "error": reason}


def _flop_counter_ratio(graph, model, shape) -> str:
    """Counted product ops / torch's flop counter on the same meta forward pass (checks
    that the traced graph holds the network's real work; "" when not on meta)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from annette_torch.kinds import PRODUCT_KINDS

    if any(p.device.type != "meta" for p in model.parameters()):
        return ""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(shape, device="meta"))
    reference = counter.get_total_flops()
    return f"{graph.total('ops', kinds=PRODUCT_KINDS) / reference:.4f}" if reference else ""


def _trace_on(name: str, device: str) -> dict:
    """Build ``name`` on ``device`` ("meta" or "cpu") and trace it; raises on failure."""
    import timm
    import torch

    import annette_torch
    from annette_torch.models_source import timm_input_shape

    with torch.device(device):
        model = timm.create_model(name, pretrained=False).eval()
    shape = timm_input_shape(model)
    start = time.perf_counter()
    graph = annette_torch.trace(model, input_shape=shape, name=name)
    seconds = time.perf_counter() - start
    ops = collections.Counter(layer.attrs.get("op", "?") for layer in graph.unknown_layers())
    return {"device": device, "method": graph.method, "layers": len(graph),
            "unknown": sum(ops.values()),
            "unknown_ops": " ".join(f"{op}x{n}" for op, n in ops.most_common()),
            "trace_s": round(seconds, 2), "ops_vs_fc": _flop_counter_ratio(graph, model, shape),
            "error": ""}


def measure(name: str) -> dict:
    """One table row for ``name``: traced on meta, or on the CPU when meta fails."""
    from annette_torch.graph.errors import first_line

    errors = []
    for device in ("meta", "cpu"):
        try:
            return {"model": name} | _trace_on(name, device)
        except Exception as error:  # noqa: BLE001 - reported in the table
            errors.append(f"{device}: {first_line(error, with_type=True)}"[:300])
    return _failed(name, " | ".join(errors))


def _worker(conn) -> None:
    """Child process: import the libraries, say so, then trace the model names received
    on ``conn`` and send back rows."""
    warnings.simplefilter("ignore")
    import timm  # noqa: F401  (imported before the clock starts)
    import torch

    import annette_torch  # noqa: F401
    torch.set_num_threads(1)
    conn.send("ready")
    while (name := conn.recv()) is not None:
        conn.send(measure(name))


class Runner:
    """A worker process reused across models and replaced when one runs over time;
    ``worker(conn)`` (default :func:`_worker`) answers model names with table rows,
    ``failed(name, reason)`` (default :func:`_failed`) is the row of a model that hung or crashed."""

    def __init__(self, timeout: float, worker=None, failed=None) -> None:
        self.timeout = timeout
        self.worker = worker or _worker
        self.failed = failed or _failed
        self.context = mp.get_context("spawn")
        self.process = None

    def _start(self) -> None:
        self.conn, child = self.context.Pipe()
        self.process = self.context.Process(target=self.worker, args=(child,), daemon=True)
        self.process.start()
        if not self.conn.poll(STARTUP_TIMEOUT) or self.conn.recv() != "ready":
            raise RuntimeError(f"the worker process did not start within {STARTUP_TIMEOUT} s")

    def run(self, name: str) -> dict:
        if self.process is None or not self.process.is_alive():
            self._start()
        self.conn.send(name)
        if self.conn.poll(self.timeout):
            try:
                return self.conn.recv()
            except EOFError:
                reason = f"worker died (exit code {self.process.exitcode})"
        else:
            reason = f"timed out after {self.timeout:g} s"
        self.stop()
        return self.failed(name, reason)

    def stop(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join()
            self.process = None


def run_all(runner: Runner, specs, show) -> list[dict]:
    """``runner``'s row for each of ``specs`` in order, each passed to ``show`` as it comes;
    the runner is stopped at the end, also on an interruption."""
    rows = []
    try:
        for spec in specs:
            rows.append(runner.run(spec))
            show(rows[-1])
    finally:
        runner.stop()
    return rows


def write_csv(path: str, rows: list[dict], columns: tuple[str, ...]) -> None:
    """``rows`` as a CSV file with a header of ``columns``."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def _print_row(row: dict, widths: dict[str, int]) -> None:
    cells = [str(row[c])[:widths[c]].ljust(widths[c]) for c in COLUMNS[:-1]]
    print(" ".join(cells), row["error"], flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="timm model names")
    parser.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per model")
    args = parser.parse_args(argv)

    widths = {"model": 32, "device": 6, "method": 10, "layers": 6, "unknown": 7,
              "unknown_ops": 40, "trace_s": 7, "ops_vs_fc": 9}
    print(" ".join(c.ljust(widths[c]) for c in COLUMNS[:-1]), "error", flush=True)
    runner = Runner(args.timeout)
    rows = run_all(runner, args.models, lambda row: _print_row(row, widths))
    if args.csv:
        write_csv(args.csv, rows, COLUMNS)

    clean = [r for r in rows if not r["error"] and r["unknown"] == 0]
    print(f"\n{len(clean)}/{len(rows)} models ({100 * len(clean) / max(len(rows), 1):.0f}%) "
          f"trace with no unknown kinds")
    for r in rows:
        if r not in clean:
            print(f"  {r['model']}: {r['error'] or 'unknown ops: ' + r['unknown_ops']}")
    ratios = [float(r["ops_vs_fc"]) for r in clean if r["ops_vs_fc"]]
    within = [x for x in ratios if abs(x - 1) <= 0.01]
    print(f"product ops vs torch.utils.flop_counter: {len(within)}/{len(ratios)} models within 1% "
          f"(ratio range {min(ratios, default=0):.4f} .. {max(ratios, default=0):.4f})")
    for r in clean:
        if r["ops_vs_fc"] and abs(float(r["ops_vs_fc"]) - 1) > 0.01:
            print(f"  {r['model']}: counted / flop counter = {r['ops_vs_fc']}")
    return 0 if len(clean) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())

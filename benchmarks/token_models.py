"""HuggingFace text models on token ids, measured end to end and estimated.

Each model (an ``hf:`` spec: random weights from its configuration class, nothing
downloaded) is exported to ONNX with int64 ``input_ids`` of ``--seq-len`` tokens, timed on
the backend with the measuring protocol (interleaved rounds, the protocol's statistic of
the pooled runs, no drift correction), and estimated with the profile from the same
traced module. One row per model: measured time, the ground truth's round-to-round
difference, the estimate, its error, and the share of the estimate answered by a
fallback or outside the calibrated range.

    python benchmarks/token_models.py --backend openvino-cpu --profile openvino-cpu
    python benchmarks/token_models.py --models hf:BertConfig --seq-len 384
"""
from __future__ import annotations

import argparse
import inspect
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from annette_torch import Estimator
from annette_torch.backends import get_backend
from annette_torch.backends.base import export_onnx, torch_threads
from annette_torch.measure.noise import round_to_round
from annette_torch.measure.protocol import ItemFailed, Protocol, combine, interleave
from annette_torch.models_source import resolve_model

MODELS = ("hf:BertConfig", "hf:GPT2Config")


class TokenModel(torch.nn.Module):
    """``model`` called with its token inputs by name, an all-ones attention mask (as a
    tokenizer gives it) and no cache, returning the tensors of its output: what is
    exported and what is estimated."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.names = model, names
        self.takes = inspect.signature(model.forward).parameters
        self.options = {"use_cache": False} if "use_cache" in self.takes else {}

    def forward(self, *ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mask = {"attention_mask": torch.ones_like(ids[0])} if "attention_mask" in self.takes else {}
        out = self.model(**dict(zip(self.names, ids)), **mask, **self.options)
        return tuple(v for v in out.to_tuple() if isinstance(v, torch.Tensor))


def _no_grad(model: torch.nn.Module, inputs: tuple) -> object:
    with torch.no_grad():
        return model(*inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="openvino-cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", default="openvino-cpu")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    backend = get_backend(args.backend, threads=args.threads)
    protocol = Protocol(rounds=args.rounds)
    estimator = Estimator(args.profile)
    runners, estimates = {}, {}
    with tempfile.TemporaryDirectory() as folder, torch_threads(args.threads):
        for spec in args.models:
            resolved = resolve_model(spec)
            model = TokenModel(resolved.module.eval(), resolved.input_names)
            vocab = getattr(resolved.module.config, "vocab_size", 1000)
            ids = [np.random.default_rng(i).integers(0, vocab, size=(1, args.seq_len), dtype=np.int64)
                   for i in range(len(resolved.input_names))]
            inputs = tuple(torch.from_numpy(x) for x in ids)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                times = estimator.kernel_times(estimator.graph_of(model, example_inputs=inputs))
            estimates[spec] = times
            if hasattr(backend, "compile_onnx"):      # a runtime of ONNX files
                with warnings.catch_warnings():     # the exporter's tracer warnings about HF's code
                    warnings.simplefilter("ignore")
                    path = export_onnx(model, None, Path(folder) / f"{resolved.name}.onnx", example_inputs=inputs)
                runners[spec] = backend.runner(backend.compile_onnx(path), ids)
            else:                                     # eager torch runs the module itself
                runners[spec] = lambda model=model, inputs=inputs: _no_grad(model, inputs)

        def measure(spec: str) -> tuple[float, ...]:
            try:
                return tuple(backend.time_runs(runners[spec], protocol.warmup, protocol.repeats).runs_ms)
            except Exception as error:  # noqa: BLE001 - a runtime error drops the model
                raise ItemFailed(str(error)) from error

        session = interleave(list(args.models), measure, protocol)

    print(f"{backend.name}, {args.threads} thread(s), profile {estimator.profile.name}, {args.seq_len} tokens; "
          f"{protocol.rounds} interleaved rounds of {protocol.warmup} warm-up + {protocol.repeats} timed runs, "
          f"{protocol.statistic} of the pooled runs")
    print(f"{'model':28s} {'measured ms':>12s} {'r2r %':>7s} {'estimate ms':>12s} {'error %':>8s} "
          f"{'fallback %':>10s} {'outside %':>10s}")
    errors = []
    for spec in args.models:
        if spec in session.failures:
            print(f"{spec:28s} failed: {session.failures[spec][:80]}")
            continue
        measured = combine(session.results[spec], session.factors(spec), protocol.statistic)
        times = estimates[spec]
        total = times.total_ms
        share = {c: 100 * float(times.time_ms[times.confidence == c].sum()) / max(total, 1e-12)
                 for c in ("fallback", "extrapolated")}
        error = 100 * (total - measured.time_ms) / measured.time_ms
        errors.append(abs(error))
        print(f"{spec:28s} {measured.time_ms:12.3f} {100 * round_to_round(measured.round_values()):7.2f} "
              f"{total:12.3f} {error:+8.1f} {share['fallback']:10.1f} {share['extrapolated']:10.1f}")
    if errors:
        print(f"MAPE {np.mean(errors):.1f} % over {len(errors)} model(s)")


if __name__ == "__main__":
    main()

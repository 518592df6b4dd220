"""Do a profile's layer models see the kernels as they run inside networks? Per kernel
kind, the times ``annette-torch calibrate --for`` measured in context against a profile's
estimates of the same kernels (a benchmark: prints a table, measures nothing).

    python benchmarks/context_gap.py --measured DIR --profile P [P ...] \\
        [--models torchvision:resnet18,torchvision:mobilenet_v3_large,torchvision:efficientnet_b0] [--input-shape 1,3,32,32] \\
        [--by-fused-layers]

``DIR`` is the table's folder (``<out>/<fingerprint folder>`` of ``calibrate --for``); the
models must be among the networks it measured. A ratio below 1 means the profile
predicts that kind faster than it ran in these networks; "-" marks a kind whose kernels the
profiler gave no time (their layers ran inside other kernels). ``--by-fused-layers`` splits each
kind by the layers fused into its kernels that may cost time (``conv+add``, ``conv+relu+add``:
batch norms and layout changes left out, :func:`annette_torch.fit.fused.costly_members`).
"""
from __future__ import annotations

import argparse
import warnings
from collections import defaultdict

from annette_torch import Estimator
from annette_torch.fit.fused import costly_members
from annette_torch.models_source import trace_model


def kernel_pairs(profile, measured: str, graphs, by_fused_layers: bool = False) -> list[tuple[str, str, float, float]]:
    """Per kernel of ``graphs`` that the table under ``measured`` answers: (its kind, or with
    ``by_fused_layers`` its kind and the fused layers that may cost time, ``+``-joined; the
    layer-model type ``profile`` answers it with, the time measured in context, ``profile``'s
    estimate), in ms."""
    with_table, alone = Estimator(profile, measured=measured), Estimator(profile)
    pairs = []
    for graph in graphs:
        table = with_table.report(graph).set_index("kernel")
        estimated = alone.report(graph).set_index("kernel")
        for kernel, row in table[table["layer_model"] == "measured"].iterrows():
            if kernel in estimated.index:
                label = row["kind"]
                if by_fused_layers:
                    fused = [graph[name].kind for name in row["layers"].split("+")[1:]]
                    label = "+".join([label, *costly_members("+".join(fused))])
                pairs.append((label, estimated.at[kernel, "layer_model"], row["time_ms"],
                              estimated.at[kernel, "time_ms"]))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measured", required=True, help="the table folder calibrate --for wrote")
    parser.add_argument("--profile", nargs="+", required=True)
    parser.add_argument("--models", default="torchvision:resnet18,torchvision:mobilenet_v3_large,"
                                            "torchvision:efficientnet_b0")
    parser.add_argument("--input-shape", default=None,
                        help="the models' input shape, as calibrate --for was given it (e.g. 1,3,32,32 for "
                             "file.py:function networks that have none of their own)")
    parser.add_argument("--by-fused-layers", action="store_true",
                        help="split each kind by the layers fused into its kernels that may cost time")
    args = parser.parse_args()
    shapes = [tuple(int(d) for d in args.input_shape.split(","))] if args.input_shape else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphs = [trace_model(spec, shapes) for spec in args.models.split(",")]
    for profile in args.profile:
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
        for kind, _, measured_ms, estimated_ms in kernel_pairs(profile, args.measured, graphs, args.by_fused_layers):
            entry = sums[kind]
            entry[0] += measured_ms
            entry[1] += estimated_ms
            entry[2] += 1
        print(f"{profile}: kernels measured in context vs its estimates ({', '.join(args.models.split(','))})")
        width = max([20, *(len(kind) + 2 for kind in sums)])
        print(f"{'kind':<{width}}{'kernels':>8}{'measured ms':>13}{'estimated ms':>14}{'ratio':>7}")
        for kind, (m, e, n) in sorted(sums.items(), key=lambda item: -item[1][0]):
            ratio = f"{e / m:>7.2f}" if m > 0 else f"{'-':>7}"     # a kind the profiler put no time on
            print(f"{kind:<{width}}{n:>8}{m:>13.3f}{e:>14.3f}{ratio}")
        print()


if __name__ == "__main__":
    main()

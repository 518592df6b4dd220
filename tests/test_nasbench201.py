"""annette_torch.nas.nasbench201: arch strings, sampling, the CIFAR network."""
import pytest
import torch

from annette_torch import trace
from annette_torch.nas.nasbench201 import (EDGES, OPS, Cell, NB201Network, Zero, arch_string, parse_arch,
                                            sample_architectures)

EXAMPLE = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_parse_and_round_trip():
    ops = parse_arch(EXAMPLE)
    assert ops == ("nor_conv_3x3", "nor_conv_3x3", "avg_pool_3x3", "skip_connect", "nor_conv_3x3", "skip_connect")
    assert arch_string(ops) == EXAMPLE
    for arch in sample_architectures(20, seed=0):
        assert arch_string(parse_arch(arch)) == arch


@pytest.mark.parametrize("bad, message", [
    ("|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|", "3 node groups"),
    ("|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|", "unknown op 'conv'"),
    ("|none~1|+|none~0|none~1|+|none~0|none~1|none~2|", "must be 'op~0'"),
    ("|none~0|+|none~0|+|none~0|none~1|none~2|", "node 2 needs 2 inputs"),
    ("none~0|+|none~0|none~1|+|none~0|none~1|none~2|", "start and end with '|'"),
    ("|none|+|none~0|none~1|+|none~0|none~1|none~2|", "must be 'op~0'"),
])
def test_bad_strings_say_what_is_wrong(bad, message):
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        parse_arch(bad)
    with pytest.raises(ValueError, match="6 ops"):
        arch_string(["none"] * 5)


def test_output_shape_and_trace():
    model = NB201Network(EXAMPLE).eval()
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    graph = trace(model, input_shape=(1, 3, 32, 32))
    assert graph.total("ops") > 0
    assert NB201Network(EXAMPLE, C=8, N=1, num_classes=3)(torch.randn(1, 3, 32, 32)).shape == (1, 3)


def test_cells_are_built_as_the_reference_implementation_builds_them():
    """Every edge is a module and runs (``none`` is ``x.mul(0.)``), every node is
    computed, also those the output does not use, and node 3 is the output."""
    ops = ("nor_conv_3x3", "nor_conv_1x1", "nor_conv_3x3", "skip_connect", "none", "none")
    model = NB201Network(ops, N=1).eval()
    cell = model.cells[0]
    assert sorted(cell.edges) == sorted(f"{s}_{t}" for s, t in EDGES)
    assert isinstance(cell.edges["1_3"], Zero) and isinstance(cell.edges["0_3"], torch.nn.Identity)
    graph = trace(model, input_shape=(1, 3, 32, 32))
    assert graph.kind_counts()["conv"] == 1 + 2 * 3 + 3 * 3     # stem, reductions, 3 convs per cell
    assert graph.kind_counts()["mul"] == 2 * 3                   # two none edges per cell
    x = torch.randn(1, 16, 8, 8)
    assert torch.equal(Zero()(x), x * 0)


def test_none_only_cells_run_and_output_zeros():
    model = NB201Network(arch_string(["none"] * 6), N=2).eval()
    x = torch.randn(1, 16, 32, 32)
    assert torch.equal(model.cells[0](x), torch.zeros_like(x))
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 10)
    graph = trace(model, input_shape=(1, 3, 32, 32))
    assert graph.kind_counts()["mul"] == 6 * 2 * 3 and not graph.dead


def test_a_bad_cell_says_what_is_wrong():
    with pytest.raises(ValueError, match="6 edge ops"):
        Cell(("none",) * 5, 8)
    with pytest.raises(ValueError, match="no module for op 'conv'"):
        Cell(("conv",) * 6, 8)


def _reference_cell(cell: Cell, x):
    """NAS-Bench-201's cell as published (xautodl's InferCell.forward): node j is
    Python's ``sum`` of its edges' outputs, ``none`` as ``x * 0``."""
    nodes = [x]
    for target in (1, 2, 3):
        terms = []
        for (source, t), op in zip(EDGES, cell.ops):
            if t == target:
                terms.append(nodes[source] * 0 if op == "none" else cell.edges[f"{source}_{target}"](nodes[source]))
        nodes.append(sum(terms))
    return nodes[3]


def test_cells_compute_what_the_published_cells_compute():
    torch.manual_seed(0)
    for arch in sample_architectures(40, seed=3):
        cell = Cell(parse_arch(arch), 4).eval()
        for bn in (m for m in cell.modules() if isinstance(m, torch.nn.BatchNorm2d)):
            bn.running_mean.uniform_(-1, 1)
            bn.bias.data.uniform_(-1, 1)
        x = torch.randn(2, 4, 8, 8)
        assert torch.allclose(cell(x), _reference_cell(cell, x), atol=1e-5), arch


def test_sampling_is_deterministic_and_distinct():
    first = sample_architectures(50, seed=201)
    assert first == sample_architectures(50, seed=201)
    assert first != sample_architectures(50, seed=202)
    assert len(set(first)) == 50
    assert len(set(sample_architectures(len(OPS) ** len(EDGES), seed=1))) == 15625
    with pytest.raises(ValueError):
        sample_architectures(15626, seed=1)


def _independent_param_count(ops, C=16, N=5, classes=10):
    """Parameters counted from the paper's description: conv k*k*c*c, BN 2c per op."""
    def per_cell(c):
        return sum({"nor_conv_1x1": c * c + 2 * c, "nor_conv_3x3": 9 * c * c + 2 * c}.get(op, 0) for op in ops)

    def reduction(c):  # conv_a 3x3 c->2c + BN, conv_b 3x3 2c->2c + BN, shortcut 1x1 c->2c
        return 9 * c * 2 * c + 2 * 2 * c + 9 * (2 * c) ** 2 + 2 * 2 * c + c * 2 * c

    stem = 27 * C + 2 * C
    head = 2 * 4 * C + 4 * C * classes + classes
    return stem + N * (per_cell(C) + per_cell(2 * C) + per_cell(4 * C)) + reduction(C) + reduction(2 * C) + head


@pytest.mark.parametrize("ops", [("none",) * 6, ("nor_conv_3x3",) * 6, parse_arch(EXAMPLE)])
def test_parameter_count(ops):
    model = NB201Network(ops)
    assert sum(p.numel() for p in model.parameters()) == _independent_param_count(ops)


def test_parameter_count_matches_the_benchmarks_published_extremes():
    # NAS-Bench-201 lists 0.073306 MB (all none) and 1.531546 MB (all nor_conv_3x3) on CIFAR-10
    assert sum(p.numel() for p in NB201Network(("none",) * 6).parameters()) == 73306
    assert sum(p.numel() for p in NB201Network(("nor_conv_3x3",) * 6).parameters()) == 1531546


def test_cell_parts_benchmark_splits_the_whole_estimate_into_cell_kinds_and_the_fixed_rest():
    """``benchmarks/cell_parts.py`` fits factors to parts of an estimate: the parts must add
    up to the estimate, convs split by kernel size, the reduction blocks in ``fixed``."""
    import importlib.util
    from pathlib import Path

    from annette_torch import Estimator

    spec = importlib.util.spec_from_file_location("cell_parts", Path(__file__).parents[1] / "benchmarks" / "cell_parts.py")
    cell_parts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cell_parts)
    arch = "|nor_conv_3x3~0|+|none~0|nor_conv_1x1~1|+|skip_connect~0|avg_pool_3x3~1|none~2|"
    est = Estimator("openvino-cpu")
    parts = cell_parts.parts_ms(est, arch)
    assert sum(parts.values()) == pytest.approx(est(NB201Network(arch).eval(), input_shape=(1, 3, 32, 32)))
    assert parts["conv 3x3"] > 0 and parts["conv 1x1"] > 0 and parts["fixed"] > 0
    only_3x3 = cell_parts.parts_ms(est, "|nor_conv_3x3~0|+|none~0|none~1|+|none~0|none~1|nor_conv_3x3~2|")
    assert "conv 1x1" not in only_3x3        # the reduction blocks' 1x1 shortcut convs count as fixed

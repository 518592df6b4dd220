"""annette_torch.nas: signature caches, lookup tables, expected latency, width gradients."""
import random

import pytest
import torch
import torchvision
from torch import nn

from annette_torch import Estimator, trace
from annette_torch.nas import (InvertedResidual, LatencyLoss, LatencyLUT, MobileNetV2Space,
                               SignatureCache, WidthLatency)


@pytest.fixture(scope="module")
def est():
    return Estimator("ncs2-myriad")


def test_cached_candidate_equals_uncached_estimate(est):
    space = MobileNetV2Space(resolution=96, classes=10)
    cache = SignatureCache(est)
    rng = random.Random(1)
    for arch in [space.mobilenet_v2()] + [space.sample(rng) for _ in range(6)]:
        cached = cache.blocks_cost(space.blocks(arch)).time_ms
        uncached = est(space.build(arch), input_shape=(1, 3, 96, 96))
        assert cached == pytest.approx(uncached, rel=1e-12)
    assert cache.hits > 0 and cache.kernel_hits > 0


def test_mobilenet_v2_of_the_space_is_torchvisions(est):
    space = MobileNetV2Space()
    cost = SignatureCache(est).blocks_cost(space.blocks(space.mobilenet_v2()))
    reference = torchvision.models.mobilenet_v2().eval()
    assert cost.time_ms == pytest.approx(est(reference, input_shape=(1, 3, 224, 224)), rel=1e-12)
    assert cost.ops == pytest.approx(trace(reference, input_shape=(1, 3, 224, 224)).total("ops"))


def test_graph_time_cache_returns_identical_results(est):
    graph = trace(torchvision.models.resnet18().eval(), input_shape=(1, 3, 64, 64))
    cache = SignatureCache(est)
    first, second = cache.graph_time_ms(graph), cache.graph_time_ms(graph)
    assert first == second == pytest.approx(est(graph) - est.profile.overhead_ms, rel=1e-12)
    # resnet18 repeats identical kernels: fewer predictions than kernels on the first call
    assert cache.kernel_misses < len(est.kernel_table(graph)) and cache.kernel_hits > 0


def _positions(channels=16, size=8):
    shape = (1, channels, size, size)
    ops = [(("mb", channels, e, k, size), lambda e=e, k=k: InvertedResidual(channels, channels, 1, e, k))
           for e in (1, 3, 6) for k in (3, 5)]
    skip = (("skip", channels, size), nn.Identity)
    return [(shape, ops + [skip]), (shape, ops[:3])]


def test_lut_entries_equal_the_estimators_block_numbers(est):
    positions = _positions()
    lut = LatencyLUT.build(SignatureCache(est), positions)
    for p, (shape, candidates) in enumerate(positions):
        for c, (_, build) in enumerate(candidates):
            assert float(lut.table_ms[p, c]) == pytest.approx(est(build().eval(), input_shape=shape)
                                                              - est.profile.overhead_ms, rel=1e-12)
    assert lut.valid.sum() == 7 + 3 and float(lut.table_ms[0, 6]) == 0.0  # identity is free
    assert lut.latency_ms([0, 2]) == pytest.approx(float(lut.table_ms[0, 0] + lut.table_ms[1, 2]) + lut.fixed_ms)
    with pytest.raises(ValueError, match="does not have"):
        lut.latency_ms([0, 5])


def test_expected_latency_gradient_matches_finite_differences(est):
    lut = LatencyLUT.build(SignatureCache(est), _positions())
    logits = torch.randn(lut.table_ms.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    logits.requires_grad_(True)
    lut.expected_ms(logits, tau=0.7).backward()
    eps = 1e-6
    for p, c in [(0, 0), (0, 3), (0, 6), (1, 1), (1, 2)]:
        bumped = logits.detach().clone()
        bumped[p, c] += eps
        lowered = logits.detach().clone()
        lowered[p, c] -= eps
        numeric = (lut.expected_ms(bumped, tau=0.7) - lut.expected_ms(lowered, tau=0.7)) / (2 * eps)
        assert float(logits.grad[p, c]) == pytest.approx(float(numeric), rel=1e-5, abs=1e-9)
    assert float(logits.grad[1, 5]) == 0.0  # invalid candidates get no gradient


def test_hard_gumbel_expected_latency_is_a_real_architecture(est):
    lut = LatencyLUT.build(SignatureCache(est), _positions())
    logits = torch.zeros(lut.table_ms.shape, requires_grad=True)
    torch.manual_seed(0)
    weights = lut.weights(logits, gumbel=True, hard=True)
    value = (weights * lut.table_ms.to(weights.dtype)).sum() + lut.fixed_ms
    choices = [int(c) for c in weights.detach().argmax(dim=1)]
    assert float(value.detach()) == pytest.approx(lut.latency_ms(choices))
    value.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


@pytest.mark.parametrize("mode", ["additive", "multiplicative"])
def test_latency_loss_pushes_towards_faster_candidates(est, mode):
    lut = LatencyLUT.build(SignatureCache(est), _positions())
    logits = torch.zeros(lut.table_ms.shape, dtype=torch.float64, requires_grad=True)
    loss_fn = LatencyLoss(lut, weight=1.0, mode=mode)
    optimizer = torch.optim.SGD([logits], lr=5.0)
    start = float(lut.expected_ms(logits).detach())
    for _ in range(30):
        optimizer.zero_grad()
        loss_fn(torch.tensor(1.0, dtype=torch.float64), logits).backward()
        optimizer.step()
    assert loss_fn.last_ms < start
    fastest = lut.table_ms.masked_fill(~lut.valid, float("inf")).argmin(dim=1)
    assert lut.derive(logits) == fastest.tolist()


def test_width_latency_equals_estimator_at_one_and_gradients_are_finite_differences(est):
    graph = trace(torchvision.models.mobilenet_v2().eval(), input_shape=(1, 3, 112, 112))
    assert float(WidthLatency(est, graph)(torch.ones(1))) == pytest.approx(est(graph), rel=1e-12)
    roofline = Estimator("ncs2-myriad", model_type="roofline")  # no ceil: exact derivative
    width = WidthLatency(roofline, graph)
    m = torch.tensor([1.1], dtype=torch.float64, requires_grad=True)
    width(m).backward()
    eps = 1e-6
    at = lambda v: width(torch.tensor([v], dtype=torch.float64))  # noqa: E731
    numeric = (at(1.1 + eps) - at(1.1 - eps)) / (2 * eps)
    assert float(m.grad) == pytest.approx(float(numeric), rel=1e-4)
    assert float(width(torch.tensor([0.5]))) < float(width(torch.tensor([1.0]))) < float(width(torch.tensor([1.5])))


def test_width_groups_scale_only_their_layers(est):
    graph = trace(torchvision.models.resnet18().eval(), input_shape=(1, 3, 64, 64))
    by_stage = WidthLatency(est, graph, group_of=lambda layer: 1 if layer.module_path.startswith("layer4") else 0,
                            num_groups=2)
    base = float(by_stage(torch.tensor([1.0, 1.0])))
    assert float(by_stage(torch.tensor([1.0, 2.0]))) > base
    m = torch.tensor([1.0, 1.0], dtype=torch.float64, requires_grad=True)
    by_stage(m).backward()
    assert (m.grad > 0).all()
    with pytest.raises(ValueError, match="expected 2 multipliers"):
        by_stage(torch.ones(3))


def test_block_cache_keys_include_the_input_shape_and_width_scales_fused_kernels(est):
    cache = SignatureCache(est)
    build = lambda: InvertedResidual(16, 16, 1, 3, 3)  # noqa: E731
    small, large = cache.block("mb", build, (1, 16, 8, 8)), cache.block("mb", build, (1, 16, 32, 32))
    assert large.time_ms > small.time_ms and cache.misses == 2
    # conv + 2x2 max-pool fuses into a conv_pool kernel on ncs2: it must scale like a conv
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1),
                          nn.MaxPool2d(2), nn.Conv2d(16, 4, 1))
    graph = trace(model, input_shape=(1, 3, 32, 32))
    width = WidthLatency(Estimator("ncs2-myriad", model_type="roofline"), graph)
    assert "conv_pool" in width.table.kinds
    ops = width.features(torch.tensor([2.0]))[:, 0] / width.base[:, 0]
    kinds = width.table.kinds
    assert [float(r) for r, k in zip(ops, kinds) if k == "conv_pool"] == [2.0, 4.0]


def test_candidates_and_lut_building_show_a_progress_bar_only_when_asked_or_on_a_terminal(est, capsys, monkeypatch):
    from annette_torch.nas import cache as cache_module
    monkeypatch.setattr(cache_module, "PROGRESS_DELAY_S", 0)    # show it at once (it waits 0.5 s otherwise)
    space = MobileNetV2Space(resolution=32, classes=10)
    archs = [space.mobilenet_v2(), space.sample(random.Random(0))]
    cache = SignatureCache(est)
    quiet = cache.candidates(space, archs)                      # pytest's stderr is no terminal: no bar
    assert capsys.readouterr().err == ""
    shown = cache.candidates(space, archs, progress=True)
    bar = capsys.readouterr().err
    assert "candidates:" in bar and "/2 [" in bar and [c.time_ms for c in shown] == [c.time_ms for c in quiet]
    cache.candidates(space, archs, progress=False)
    LatencyLUT.build(SignatureCache(est), _positions(), progress=False)
    assert capsys.readouterr().err == ""
    LatencyLUT.build(SignatureCache(est), _positions(), progress=True)
    assert "latency table" in capsys.readouterr().err


def test_block_costs_count_only_the_returned_maps_reorder():
    """On openvino-cpu a returned feature map costs a reorder into NCHW; a block's output
    feeds the next block, so only the last block's reorder is counted."""
    from annette_torch.nas import SignatureCache

    def first():
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())

    def second():
        return nn.Sequential(nn.Conv2d(16, 24, 3, padding=1), nn.ReLU())

    est = Estimator("openvino-cpu")
    cache = SignatureCache(est)
    blocks = [("first", first, (1, 3, 32, 32)), ("second", second, (1, 16, 32, 32))]
    cost = cache.blocks_cost(blocks)
    assert cost.output_reorder_ms > 0 and cache.block("first", first, (1, 3, 32, 32)).output_reorder_ms > 0
    whole = nn.Sequential(first(), second()).eval()
    assert cost.time_ms == pytest.approx(est(whole, input_shape=(1, 3, 32, 32)), rel=1e-9)


def test_candidates_on_both_sides_of_the_weight_cache_equal_the_estimator():
    """With a profile whose weight cache lies among a space's candidates, the signature
    cache, a lookup table and the width latency each take the regime the network's own
    weights decide, as the estimator does: small candidates cached, large ones from memory."""
    import dataclasses

    from annette_torch import load_profile

    space = MobileNetV2Space(resolution=96)   # 1000 classes: a classifier the floor binds
    rng = random.Random(3)
    archs = [space.sample(rng) for _ in range(8)]
    models = [space.build(a) for a in archs]
    weight_bytes = sorted(4.0 * sum(p.numel() for p in m.parameters()) for m in models)
    shipped = load_profile("openvino-cpu")
    profile = dataclasses.replace(shipped, weight_cache_bytes=(weight_bytes[3] + weight_bytes[4]) / 2,
                                  weight_bandwidth_bytes_s=shipped.weight_bandwidth_bytes_s or 2e10)
    est = Estimator(profile)
    cache = SignatureCache(est)
    regimes = set()
    for arch, model in zip(archs, models):
        graph = trace(model, input_shape=(1, 3, 96, 96))
        regimes.add(est.report(graph).attrs["weights_from_memory"])
        assert cache.blocks_cost(space.blocks(arch)).time_ms == pytest.approx(est(graph), rel=1e-12)
        assert float(WidthLatency(est, graph)(torch.ones(1))) == pytest.approx(est(graph), rel=1e-12)
    assert regimes == {True, False}
    always = Estimator(dataclasses.replace(profile, weight_cache_bytes=None))
    graphs = [trace(m, input_shape=(1, 3, 96, 96)) for m in models]
    assert any(always(g) > est(g) for g in graphs)

    positions = [((1, 16, 8, 8), [(("mb", e), lambda e=e: InvertedResidual(16, 16, 1, e, 3)) for e in (1, 6)]),
                 ((1, 16, 8, 8), [(("wide", f), lambda f=f: nn.Conv2d(16, 16, 1) if f == 1 else
                                   nn.Sequential(nn.Flatten(), nn.Linear(16 * 64, 16 * 64 * f), nn.Unflatten(1, (16 * f, 8, 8)),
                                                 nn.Conv2d(16 * f, 16, 1))) for f in (1, 64)])]
    small = Estimator(dataclasses.replace(profile, weight_cache_bytes=8e6))
    lut = LatencyLUT.build(SignatureCache(small), positions)
    assert lut.cached is not None
    for choices in ([0, 0], [1, 0], [0, 1], [1, 1]):
        net = nn.Sequential(positions[0][1][choices[0]][1](), positions[1][1][choices[1]][1]())
        assert lut.latency_ms(choices) == pytest.approx(small(net, input_shape=(1, 16, 8, 8)), rel=1e-9)
    assert lut.latency_ms([0, 1]) > lut.latency_ms([0, 0])

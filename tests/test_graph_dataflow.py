"""What reaches the output: dead branches, in-place writes and graph outputs.

A graph compiler (OpenVINO, ONNX Runtime; ONNX export itself) drops layers whose results
never reach an output, eager torch runs them. An in-place write (``copy_`` into a
zero-filled buffer, ``x[i] = y``) makes the buffer's readers depend on what was written,
so the layers after it are real work, not a constant. A layer whose result the network
returns is written out, so nothing fuses across it.
"""
import warnings

import pytest
import torch
from torch import nn

from annette_torch import Estimator, FreeWorkWarning, trace
from annette_torch.kinds import FEATURES


def _quiet_estimator(profile: str) -> Estimator:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Estimator(profile)


class DeadBranch(nn.Module):
    """Two convs whose result is never used, beside the 1x1 conv the network returns."""

    def __init__(self, with_dead: bool = True) -> None:
        super().__init__()
        self.with_dead = with_dead
        self.a, self.b = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)
        self.out = nn.Conv2d(16, 16, 1)

    def forward(self, x):
        if self.with_dead:
            self.b(torch.relu(self.a(x)))
        return self.out(x)


class DataDependent(DeadBranch):
    """The same, with control flow on values: FX cannot trace it, eager capture does."""

    def forward(self, x):
        if x.sum() > -1e30:
            self.b(torch.relu(self.a(x)))
        return self.out(x)


@pytest.mark.parametrize("model_class", [DeadBranch, DataDependent])
def test_a_branch_that_reaches_no_output_is_free_on_graph_compilers_and_full_cost_on_eager_torch(model_class):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                      # the eager-capture notice
        graph = trace(model_class().eval(), input_shape=(1, 16, 32, 32))
        lean = trace(DeadBranch(with_dead=False).eval(), input_shape=(1, 16, 32, 32))
    assert graph.outputs == ("out",) and graph.dead >= {"a", "relu", "b"}     # and the condition's sum, gt
    compiler, eager = _quiet_estimator("openvino-cpu"), _quiet_estimator("torch-cpu")
    report = compiler.report(graph)
    assert report.set_index("kernel").loc[["a", "relu", "b"], "time_ms"].eq(0).all()
    assert compiler(graph) == pytest.approx(compiler(lean))
    rows = eager.report(graph)
    dead = rows[rows["layers"].map(lambda names: set(names.split("+")) <= {"a", "relu", "b", "sum", "gt"})]
    assert len(dead) >= 2 and (dead["time_ms"] > 0).all()
    assert eager(graph) == pytest.approx(eager(lean) + dead["time_ms"].sum(), rel=1e-9)


class CopyIntoBuffer(nn.Module):
    """A detection model's batching: the input copied into a zero-filled buffer, then five
    convs on the buffer."""

    def __init__(self, write: str = "copy_") -> None:
        super().__init__()
        self.write = write
        self.convs = nn.Sequential(*[nn.Conv2d(8, 8, 3, padding=1) for _ in range(5)])

    def forward(self, x):
        buffer = torch.zeros(1, 8, 64, 64)
        if self.write == "copy_":
            buffer[:, :, :32, :32].copy_(x)
        elif self.write == "setitem":
            buffer[:, :, :32, :32] = x
        else:
            buffer += torch.nn.functional.pad(x, (0, 32, 0, 32))
        return self.convs(buffer)


@pytest.mark.parametrize("write", ["copy_", "setitem", "iadd"])
def test_layers_reading_a_buffer_written_in_place_are_real_work(write):
    graph = trace(CopyIntoBuffer(write).eval(), input_shape=(1, 8, 32, 32))
    direct = trace(CopyIntoBuffer(write).convs.eval(), input_shape=(1, 8, 64, 64))
    for profile in ("openvino-cpu", "torch-cpu"):
        estimator = _quiet_estimator(profile)
        rows = estimator.report(graph)
        convs = rows[rows["kind"].str.startswith("conv")]
        assert len(convs) == 5 and (convs["time_ms"] > 0).all(), (profile, rows)
        assert estimator(graph) >= 0.95 * estimator(direct), profile


def test_in_place_writes_followed_by_eager_capture_too():
    class Eager(CopyIntoBuffer):
        def forward(self, x):
            buffer = torch.zeros(1, 8, 64, 64)
            if x.sum() > -1e30:                               # FX cannot trace this
                buffer[:, :, :32, :32].copy_(x)
            return self.convs(buffer)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = trace(Eager().eval(), input_shape=(1, 8, 32, 32))
    assert graph.method.startswith("eager")
    assert graph.written and not graph.folded & {layer.name for layer in graph if layer.kind == "conv"}


class ReturnsBoth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y, torch.relu(y)


def test_a_layer_the_network_returns_is_not_fused_into_its_consumer():
    graph = trace(ReturnsBoth().eval(), input_shape=(1, 8, 16, 16))
    assert set(graph.outputs) == {"conv", "relu"}
    report = _quiet_estimator("openvino-cpu").report(graph)
    assert report["fusion"].tolist() == ["not-fused", "not-fused"]


def test_onnx_import_records_the_graph_outputs(tmp_path):
    from annette_torch.graph import import_onnx

    path = tmp_path / "both.onnx"
    torch.onnx.export(ReturnsBoth().eval(), (torch.zeros(1, 8, 16, 16),), str(path), dynamo=False)
    graph = import_onnx(path)
    assert len(graph.outputs) == 2 and graph.dead == frozenset()


def test_an_estimate_that_frees_much_of_a_network_says_so_on_graph_compilers_only():
    graph = trace(DeadBranch().eval(), input_shape=(1, 16, 32, 32))
    for profile, warns in (("openvino-cpu", True), ("torch-cpu", False)):
        estimator = _quiet_estimator(profile)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            estimator(graph)
        messages = [str(w.message) for w in caught if issubclass(w.category, FreeWorkWarning)]
        assert bool(messages) == warns, (profile, messages)
        if warns:
            assert "% of its operations are costed as free" in messages[0] and "3 layer(s) whose" in messages[0]


class GhostTail(nn.Module):
    """GhostNet's module tail: two convs concatenated, then ``[:, :keep]`` channels."""

    def __init__(self, keep: int = 24) -> None:
        super().__init__()
        self.keep = keep
        self.a, self.b = nn.Conv2d(16, 12, 1), nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.out = nn.Conv2d(keep, 16, 1)

    def forward(self, x):
        a = torch.relu(self.a(x))
        return self.out(torch.cat([a, torch.relu(self.b(a))], 1)[:, :self.keep])


def _slice_rows(estimator: Estimator, graph):
    report = estimator.report(graph)
    return report[report["kind"] == "slice"]


def test_a_slice_of_a_whole_concat_is_free_where_the_runtime_removes_it():
    """OpenVINO's runtime model has no StridedSlice for a slice selecting all channels
    (``removes_identity_slices``); ONNX Runtime keeps the Slice in its optimized graph and
    eager torch runs it: both pay. A slice of part of the channels runs everywhere."""
    whole = trace(GhostTail(24).eval(), input_shape=(1, 16, 16, 16))
    part = trace(GhostTail(20).eval(), input_shape=(1, 16, 16, 16))
    assert whole.identity_slices == {"getitem"} and part.identity_slices == frozenset()
    rows = _slice_rows(_quiet_estimator("openvino-cpu"), whole)
    assert len(rows) == 1 and rows["time_ms"].eq(0).all() and rows["confidence"].eq("free").all()
    for profile in ("torch-cpu", "onnxruntime-cpu"):
        rows = _slice_rows(_quiet_estimator(profile), whole)
        assert len(rows) == 1 and (rows["time_ms"] > 0).all() and not rows["confidence"].eq("free").any(), profile
    rows = _slice_rows(_quiet_estimator("openvino-cpu"), part)
    assert len(rows) == 1 and (rows["time_ms"] > 0).all()


def test_a_gather_of_every_row_is_no_identity_slice():
    class Permuted(nn.Module):
        def forward(self, x):
            return x[:, [2, 0, 1]] + x[:, torch.tensor([1, 2, 0])] + x[:, 0:3] + x[..., :]

    graph = trace(Permuted(), input_shape=(1, 3, 8, 8))
    slices = [layer.name for layer in graph if layer.kind == "slice"]
    assert len(slices) == 4 and graph.identity_slices == set(slices[2:])


def test_ghostnet_slices_are_free_on_openvino_only():
    timm = pytest.importorskip("timm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = trace(timm.create_model("ghostnet_100", pretrained=False).eval(), input_shape=(1, 3, 224, 224))
    assert len(graph.identity_slices) == 32 == sum(layer.kind == "slice" for layer in graph)
    assert _slice_rows(_quiet_estimator("openvino-cpu"), graph)["confidence"].eq("free").all()
    assert (_slice_rows(_quiet_estimator("torch-cpu"), graph)["time_ms"] > 0).all()


@pytest.mark.parametrize("profile", ["ncs2-myriad", "zcu102-dpu"])
def test_board_compilers_remove_dead_code_but_fold_nothing_else(profile):
    """NCS2 (OpenVINO on the ONNX export) and ZCU102 (Vitis AI) compile a graph built from
    the network's outputs: a dead branch costs nothing there; they keep ANNETTE's mapping
    otherwise (no constant folding assumed)."""
    graph = trace(DeadBranch().eval(), input_shape=(1, 16, 32, 32))
    lean = trace(DeadBranch(with_dead=False).eval(), input_shape=(1, 16, 32, 32))
    estimator = _quiet_estimator(profile)
    assert estimator.profile.removes_dead_code and not estimator.profile.optimizes_graph
    with pytest.warns(FreeWorkWarning, match="3 layer"):
        assert estimator(graph) == pytest.approx(estimator(lean))
    report = estimator.report(graph).set_index("kernel")
    assert report.loc[["a", "b"], "confidence"].eq("free").all()


class TokenConvBlock(nn.Module):
    """PVT v2's MLP and ConvNeXt's block in one: tokens transposed into a depthwise conv
    and back (``transpose(1, 2).view``, ``flatten(2).transpose(1, 2)``), then a conv whose
    output is permuted to channels-last for a layer norm and back with ``.contiguous()``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.dw = nn.Linear(16, 32), nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.conv, self.norm = nn.Conv2d(32, 32, 1), nn.LayerNorm(32)

    def forward(self, tokens):
        y = self.fc(tokens).transpose(1, 2).view(1, 32, 8, 8)
        y = nn.functional.gelu(self.dw(y).flatten(2).transpose(1, 2))
        y = self.conv(y.transpose(1, 2).reshape(1, 32, 8, 8))
        return self.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()


def _permute_rows(estimator: Estimator, graph):
    report = estimator.report(graph).set_index("kernel")
    return report[report["kind"] == "permute"]


def test_transposes_next_to_a_conv_are_free_where_the_conv_reads_channels_last():
    """OpenVINO's runtime model has no Transpose for a transpose to channels-first that
    feeds only convs, nor for the token transpose of such a conv's flattened output
    (``folds_layout_transposes``); it runs the permute of a conv's output to channels-last
    and the one back that the network returns. ``.contiguous()`` exports to nothing, so
    every graph compiler drops it; eager torch copies there."""
    graph = trace(TokenConvBlock().eval(), input_shape=(1, 64, 16))
    transposes = [layer.name for layer in graph if layer.kind == "permute" and layer.op != "contiguous"]
    assert len(transposes) == 5
    assert graph.layout_transposes == {transposes[0], transposes[1], transposes[2]}
    assert graph.export_dropped == {"contiguous"}
    rows = _permute_rows(_quiet_estimator("openvino-cpu"), graph)
    assert rows.loc[transposes[:3] + ["contiguous"], "confidence"].eq("free").all()
    assert (rows.loc[transposes[3:], "time_ms"] > 0).all()
    rows = _permute_rows(_quiet_estimator("onnxruntime-cpu"), graph)
    assert (rows.loc[transposes, "time_ms"] > 0).all() and rows.loc["contiguous", "confidence"] == "free"
    rows = _permute_rows(_quiet_estimator("torch-cpu"), graph)
    assert (rows.loc[transposes + ["contiguous"], "time_ms"] > 0).all()


def test_a_transpose_feeding_a_conv_and_something_else_is_no_layout_transpose():
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 1)

        def forward(self, x):                       # (1, 4, 4, 8) channels-last
            y = x.permute(0, 3, 1, 2)
            return self.conv(y) + y

    graph = trace(Shared(), input_shape=(1, 4, 4, 8))
    assert graph.layout_transposes == frozenset()


def test_profile_fields_for_removed_layers_round_trip_and_are_checked(tmp_path):
    import json

    from annette_torch import load_profile
    from annette_torch.profiles import ProfileError

    ov = load_profile("openvino-cpu")
    assert ov.removes_identity_slices and ov.removes_dead_code is None       # dead code: as optimizes_graph
    assert ov.folds_layout_transposes and not load_profile("onnxruntime-cpu").folds_layout_transposes
    data = load_profile("ncs2-myriad").to_dict()
    assert data["removes_dead_code"] is True and "removes_identity_slices" not in data
    assert "folds_layout_transposes" not in data
    assert ov.groups_split_convs and not load_profile("onnxruntime-cpu").groups_split_convs
    assert "groups_split_convs" not in data
    assert ov.splits_shuffles_in_place and not load_profile("onnxruntime-cpu").splits_shuffles_in_place
    assert "splits_shuffles_in_place" not in data
    for field in ("removes_identity_slices", "folds_layout_transposes", "groups_split_convs", "splits_shuffles_in_place"):
        path = tmp_path / f"bad-{field}.json"
        path.write_text(json.dumps({**data, field: "yes"}))
        with pytest.raises(ProfileError, match=field):
            load_profile(str(path))
    path = tmp_path / "folds.json"
    path.write_text(json.dumps({**data, "folds_layout_transposes": True}))
    assert load_profile(str(path)).folds_layout_transposes


class SplitConvs(nn.Module):
    """MixNet's grouped pointwise conv: the channels split into ``parts``, a conv on each,
    the outputs concatenated, then a batch norm and a ReLU; ``sizes``, ``kernels``,
    ``bias`` and ``relu_each`` make variants OpenVINO does not turn into a grouped conv."""

    def __init__(self, c: int = 32, f: int = 48, parts: int = 2, sizes=None, kernels=None, bias: bool = False,
                 relu_each: bool = False) -> None:
        super().__init__()
        self.sizes = sizes or [c // parts] * parts
        self.relu_each = relu_each
        self.convs = nn.ModuleList(nn.Conv2d(size, f // parts, k, padding=k // 2, bias=bias)
                                   for size, k in zip(self.sizes, kernels or [1] * parts))
        self.bn = nn.BatchNorm2d(f)

    def forward(self, x):
        parts = torch.split(x, self.sizes, 1)
        outs = [conv(parts[i]) for i, conv in enumerate(self.convs)]
        return torch.relu(self.bn(torch.cat([torch.relu(o) for o in outs] if self.relu_each else outs, 1)))


class GroupedConv(nn.Module):
    """What :class:`SplitConvs` computes, written as one grouped conv."""

    def __init__(self, c: int = 32, f: int = 48, parts: int = 2) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, f, 1, groups=parts, bias=False), nn.BatchNorm2d(f)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("parts", [2, 4])
def test_a_split_the_same_conv_on_each_part_and_their_concat_are_one_grouped_conv_on_openvino(parts):
    """OpenVINO's ConvolutionToGroupConvolutionFusion runs MixNet's split -> convs -> concat
    as one GroupConvolution (no Split, no Concat): estimated as the grouped conv written
    directly, with the batch norm and ReLU fused into it as into any conv. ONNX Runtime and
    eager torch run the split, each conv and the concat."""
    graph = trace(SplitConvs(parts=parts).eval(), input_shape=(1, 32, 28, 28))
    convs = tuple(layer.name for layer in graph if layer.kind == "conv")
    split, concat = (next(layer.name for layer in graph if layer.kind == kind) for kind in ("split", "concat"))
    assert graph.split_conv_groups == {concat: (split, convs)}

    openvino = _quiet_estimator("openvino-cpu")
    report = openvino.report(graph)
    assert report["kind"].tolist() == ["conv", "output_reorder"]     # the returned map back to NCHW
    assert set(report.loc[0, "layers"].split("+")) == {layer.name for layer in graph if not layer.free}
    features = dict(zip(FEATURES, openvino.kernel_table(graph).features[0]))
    assert (features["c"], features["f"], features["groups"]) == (32, 48, parts)
    direct = trace(GroupedConv(parts=parts).eval(), input_shape=(1, 32, 28, 28))
    assert openvino(graph) == pytest.approx(openvino(direct))
    for eager_or_onnx in ("onnxruntime-cpu", "torch-cpu"):
        kinds = _quiet_estimator(eager_or_onnx).report(graph)["kind"].tolist()
        assert "split" in kinds and "concat" in kinds and kinds.count("conv") == parts


@pytest.mark.parametrize("variant", [dict(bias=True), dict(sizes=[20, 12]), dict(kernels=[1, 3]),
                                     dict(relu_each=True)],
                         ids=["bias", "unequal-parts", "other-kernels", "relu-on-each"])
def test_split_convs_that_openvino_keeps_apart_are_not_grouped(variant):
    """A conv with a bias (ONNX's bias is an add after it), parts of unequal size, convs of
    other kernels, or a layer between a conv and the concat: OpenVINO runs the split, the
    convs and the concat (probed on OpenVINO 2026.4)."""
    graph = trace(SplitConvs(**variant).eval(), input_shape=(1, 32, 28, 28))
    assert graph.split_conv_groups == {}
    assert "concat" in _quiet_estimator("openvino-cpu").report(graph)["kind"].tolist()


class TwoBranches(nn.Module):
    """Two convs summed with Python's ``sum`` (``0 + a + b``) or with ``a + b``."""

    def __init__(self, python_sum: bool) -> None:
        super().__init__()
        self.python_sum = python_sum
        self.a, self.b = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 1)

    def forward(self, x):
        terms = [self.a(x), self.b(x)]
        total = sum(terms) if self.python_sum else terms[0] + terms[1]
        return (total * 1.0 - 0) / 1


def test_arithmetic_with_zero_or_one_is_free_and_looked_through_on_graph_compilers():
    """The ONNX export drops ``0 + x``, ``x - 0``, ``x * 1``; OpenVINO and ONNX Runtime remove
    ``x * 1.0``, ``x / 1``: free there, and the residual add still fuses into its conv.
    Eager torch runs each of them."""
    summed = trace(TwoBranches(True).eval(), input_shape=(1, 16, 16, 16))
    plain = trace(TwoBranches(False).eval(), input_shape=(1, 16, 16, 16))
    assert {summed[name].kind for name in summed.identity_arithmetic} == {"add", "mul", "sub", "div"}
    assert len(summed.identity_arithmetic) == 4 and len(plain.identity_arithmetic) == 3
    compiler = _quiet_estimator("openvino-cpu")
    assert compiler(summed) == pytest.approx(compiler(plain))
    report = compiler.report(summed).set_index("kernel")
    assert report.loc[sorted(summed.identity_arithmetic), "confidence"].eq("free").all()
    assert "add_1" in report.loc["b", "layers"].split("+")              # a + b fused into the later conv
    eager = _quiet_estimator("torch-cpu")
    rows = eager.report(summed).set_index("kernel")
    assert (rows.loc[sorted(summed.identity_arithmetic), "time_ms"] > 0).all()
    assert eager(summed) > eager(plain)


def test_a_nas_bench_201_cell_pays_for_none_edges_but_not_for_pythons_sum_on_openvino():
    """A standard cell: ``none`` is ``x.mul(0.)``, a kernel OpenVINO still runs, and each node
    is ``sum(...)``, whose ``0 +`` the export drops."""
    from annette_torch.nas.nasbench201 import Cell, NB201Network

    class PlainSums(Cell):
        """The same cell summing as ``sum`` does, term by term, without the leading ``0 +``."""

        def forward(self, x):
            nodes = [x]
            for target in (1, 2, 3):
                terms = (self.edges[f"{source}_{target}"](nodes[source]) for source in range(target))
                node = next(terms)
                for term in terms:
                    node = node + term
                nodes.append(node)
            return nodes[3]

    arch = "|nor_conv_3x3~0|+|nor_conv_3x3~0|none~1|+|none~0|skip_connect~1|nor_conv_1x1~2|"
    standard = NB201Network(arch, N=1).eval()
    plain = NB201Network(arch, N=1).eval()
    plain.cells = nn.Sequential(*[PlainSums(c.ops, c.edges["0_1"][1].in_channels) if isinstance(c, Cell) else c
                                  for c in standard.cells])
    standard_graph, plain_graph = (trace(m, input_shape=(1, 3, 32, 32)) for m in (standard, plain))
    compiler = _quiet_estimator("openvino-cpu")
    assert compiler(standard_graph) == pytest.approx(compiler(plain_graph))
    muls = [layer.name for layer in standard_graph.layers if layer.kind == "mul"]
    times = compiler.kernel_times(standard_graph)
    table = times.table
    holding = [next(k for k, members in enumerate(table.layers) if name in members) for name in muls]
    assert len(muls) == 2 * 3                       # every none edge runs, in a kernel of its own or merged
    assert not table.free[holding].any() and (times.time_ms[holding] > 0).all()


def test_a_cell_that_computes_a_node_nothing_reads_pays_for_it_on_eager_torch_only():
    """The other way users write NAS-Bench-201 cells: ``none`` edges left out of the sums,
    every node still computed. Node 2 below feeds node 3 only through ``none``: dead."""
    from annette_torch.nas.nasbench201 import Cell, NB201Network, Zero

    class SkipsNone(Cell):
        def forward(self, x):
            nodes = [x]
            for target in (1, 2, 3):
                terms = [self.edges[f"{s}_{target}"](nodes[s]) for s in range(target)
                         if not isinstance(self.edges[f"{s}_{target}"], Zero)]
                nodes.append(sum(terms) if terms else torch.zeros_like(x))
            return nodes[3]

    arch = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_1x1~1|none~2|"
    model = NB201Network(arch, N=1).eval()
    model.cells = nn.Sequential(*[SkipsNone(c.ops, c.edges["0_1"][1].in_channels) if isinstance(c, Cell) else c
                                  for c in model.cells])
    graph = trace(model, input_shape=(1, 3, 32, 32))
    dead_convs = {layer.name for layer in graph if layer.kind == "conv" and layer.name in graph.dead}
    assert len(dead_convs) == 2 * 3                        # the two convs into node 2, per cell
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiler, eager = _quiet_estimator("openvino-cpu").report(graph), _quiet_estimator("torch-cpu").report(graph)
    assert compiler.set_index("kernel").loc[sorted(dead_convs), "confidence"].eq("free").all()
    assert (eager.set_index("kernel").loc[sorted(dead_convs), "time_ms"] > 0).all()


def test_two_slices_of_one_tensor_are_two_layers_not_a_repeat():
    """``y[:, :16]`` and ``y[:, 16:]`` (a channel split) both run; so do two narrows and
    ``x + 1`` beside ``x + 2``: a compiler merges only layers that compute the same."""
    class Halves(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(32, 32, 1)

        def forward(self, x):
            y = self.conv(x)
            return (y[:, :16] + y[:, 16:], y.narrow(1, 0, 8) * y.narrow(1, 8, 8), (y + 1) * (y + 2), y[:, :16] * 3)

    graph = trace(Halves(), input_shape=(1, 32, 8, 8))
    assert {graph[name].kind for name in graph.folded} == {"slice"}      # only the second y[:, :16]
    assert len(graph.folded) == 1


def test_a_profile_remapped_or_adapted_to_eager_torch_frees_no_slices():
    import dataclasses

    from annette_torch import load_profile
    from annette_torch.layer_models.adapted import Adaptation
    from annette_torch.transfer.fewshot import MAPPING_NAMES, remapped

    graph = trace(GhostTail(24).eval(), input_shape=(1, 16, 16, 16))
    openvino = load_profile("openvino-cpu")
    for profile in (remapped(openvino, MAPPING_NAMES["eager"]),
                    dataclasses.replace(openvino, adaptation=Adaptation(fusion="none", optimizes_graph=False))):
        rows = _slice_rows(_quiet_estimator(profile), graph)
        assert (rows["time_ms"] > 0).all()
    assert _slice_rows(_quiet_estimator(remapped(openvino, MAPPING_NAMES["source"])), graph)["time_ms"].eq(0).all()


def test_an_identity_between_a_norm_and_its_activation_does_not_stop_fusion():
    class BatchNormAct(nn.Module):          # timm's BatchNormAct2d: batch norm, drop (identity), act
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.drop, self.act = nn.Identity(), nn.ReLU6()

        def forward(self, x):
            return self.act(self.drop(self.bn(self.conv(x))))

    plain = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU6())
    for model in (BatchNormAct(), plain):
        table = Estimator("openvino-cpu").kernel_table(trace(model.eval(), input_shape=(1, 8, 16, 16)))
        assert [kind for kind, free in zip(table.kinds, table.free) if not free] == ["conv", "output_reorder"]

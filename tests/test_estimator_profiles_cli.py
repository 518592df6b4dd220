"""Estimator API, built-in profiles, profile validation and the command line."""
import json
import math
import warnings

import pytest
import torchvision
from torch import nn

from annette_torch import Estimator, ProfileError, UnknownKindWarning, load_profile, trace
from annette_torch.cli import main as cli_main
from annette_torch.profiles import builtin_names

PUBLISHED_ZCU102_CONV = {"peak_ops_s": 1173488332240.4373, "bandwidth_bytes_s": 15109525179.712227,
                         "f": (16.0, 0.881308), "c": (16.0, 1.0), "h": (8.0, 0.485896)}


@pytest.fixture(scope="module")
def resnet18_graph():
    return trace(torchvision.models.resnet18().eval(), input_shape=(1, 3, 224, 224))


def test_builtin_profiles_load_with_fingerprints_and_notes():
    assert {"zcu102-dpu", "ncs2-myriad"} <= set(builtin_names())
    for name in ("zcu102-dpu", "ncs2-myriad"):
        profile = load_profile(name)
        assert set(profile.fingerprint) >= {"backend", "device", "runtime_version", "threads", "precision"}
        assert profile.mapping and "default" in profile.layer_models["roofline"]
        assert any("not available" in note for note in profile.notes)  # regressors missing, said so
        assert set(profile.layer_models) == {"roofline", "refined_roofline"}
        assert profile.model_preference == ("refined_roofline", "roofline")
        assert profile.layer_models["refined_roofline"]["conv"].unroll


def test_zcu102_conv_model_carries_the_published_parameters():
    conv = load_profile("zcu102-dpu").layer_models["refined_roofline"]["conv"]
    assert conv.peak_ops_s == PUBLISHED_ZCU102_CONV["peak_ops_s"]
    assert conv.bandwidth_bytes_s == PUBLISHED_ZCU102_CONV["bandwidth_bytes_s"]
    for dim in ("f", "c", "h"):
        assert (conv.unroll[dim]["par"], conv.unroll[dim]["alpha"]) == PUBLISHED_ZCU102_CONV[dim]
    assert (conv.bit_act, conv.bit_weights) == (8, 8)


def test_estimate_is_sum_of_report_and_one_conv_matches_hand_computation(resnet18_graph):
    est = Estimator("zcu102-dpu")
    report = est.report(resnet18_graph)
    assert est(resnet18_graph) == pytest.approx(report["time_ms"].sum() + est.profile.overhead_ms)
    assert set(report.columns) >= {"kernel", "kind", "layers", "ops", "bytes", "time_ms", "layer_model", "bound"}
    # layer1.0.conv1: 64->64, 3x3, 56x56 output; fused with bn1 + relu on the DPU
    row = report[report["kernel"] == "layer1_0_conv1"].iloc[0]
    assert row["layers"] == "layer1_0_conv1+layer1_0_bn1+layer1_0_relu"
    ops = 2 * 56 * 56 * 64 * 64 * 9 + 2 * 64 * 56 * 56 + 64 * 56 * 56  # conv + bn + relu
    p = PUBLISHED_ZCU102_CONV

    def eff(n, par, alpha):
        e = n / (math.ceil(n / par) * par)
        return 1 / ((1 - alpha) + alpha / e)

    compute_s = ops / (p["peak_ops_s"] * eff(64, *p["f"]) * eff(64, *p["c"]) * eff(56, *p["h"]))
    memory_s = ((64 * 56 * 56 * 2) * 8 + (64 * 64 * 9 + 64 + 4 * 64) * 8) / 8 / p["bandwidth_bytes_s"]
    assert row["time_ms"] == pytest.approx(max(compute_s, memory_s) * 1e3, rel=1e-6)
    assert row["bound"] == ("compute" if compute_s > memory_s else "memory")


def test_mapping_makes_fused_networks_faster_and_every_layer_is_accounted_for(resnet18_graph):
    with_map = Estimator("ncs2-myriad").report(resnet18_graph)
    without = Estimator("ncs2-myriad", use_mapping=False).report(resnet18_graph)
    assert len(without) == len(resnet18_graph) > len(with_map)
    absorbed = [name for names in with_map["layers"] for name in names.split("+")]
    assert sorted(absorbed) == sorted(layer.name for layer in resnet18_graph)
    assert with_map["time_ms"].sum() < without["time_ms"].sum()


def test_batch_size_scales_the_estimate():
    model = torchvision.models.mobilenet_v2().eval()
    est = Estimator("zcu102-dpu")
    one, four = est(model, input_shape=(1, 3, 224, 224)), est(model, input_shape=(4, 3, 224, 224))
    assert 3.0 < four / one <= 4.0 + 1e-9


def test_unknown_kind_falls_back_to_roofline_with_one_warning_naming_it():
    class Opaque(nn.Module):  # recorded whole as a leaf: a kind no formula claims
        def forward(self, x):
            return x.flip(1) * 2

    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), Opaque(), Opaque())
    graph = trace(model, input_shape=(1, 8, 32, 32), leaf_modules=(Opaque,))
    est = Estimator("ncs2-myriad")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ms = est(graph)
    messages = [str(w.message) for w in caught if issubclass(w.category, UnknownKindWarning)]
    assert len(messages) == 1 and "Opaque x2" in messages[0] and "roofline" in messages[0]
    report = est.report(graph)
    unknown = report[report["kind"] == "unknown"]
    assert len(unknown) == 2 and (unknown["profile_entry"] == "default").all() and (unknown["time_ms"] > 0).all()
    # the preferred set's default is ANNETTE's "Base" roofline: a refined roofline with no unrolled dims
    default = est.profile.layer_models[unknown["layer_model"].iloc[0]]["default"]
    assert getattr(default, "unroll", {}) == {}
    assert ms == pytest.approx(report["time_ms"].sum())


def test_model_type_selects_published_roofline_and_falls_back_per_kind(resnet18_graph):
    refined = Estimator("zcu102-dpu").report(resnet18_graph)
    roofline = Estimator("zcu102-dpu", model_type="roofline").report(resnet18_graph)
    assert set(roofline["layer_model"]) <= {"roofline", "free"}
    convs = refined["kind"] == "conv"
    assert (refined.loc[convs, "layer_model"] == "refined_roofline").all()
    # unrolling losses only slow kernels down: refined >= roofline for every conv
    assert (refined.loc[convs, "time_ms"].values >= roofline.loc[convs, "time_ms"].values - 1e-12).all()
    # ZCU102's refined set has no relu entry: relu kernels fall back to the roofline default
    relu = Estimator("zcu102-dpu", use_mapping=False).report(resnet18_graph)
    assert set(relu.loc[relu["kind"] == "relu", "profile_entry"]) == {"default"}
    with pytest.raises(ValueError, match="has no 'statistical' layer models"):
        Estimator("zcu102-dpu", model_type="statistical")


def test_unknown_profile_lists_the_available_ones():
    with pytest.raises(ProfileError, match="available: .*ncs2-myriad.*zcu102-dpu"):
        Estimator("no-such-board")


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(version=99), "version"),
    (lambda d: d.update(format="something"), "format"),
    (lambda d: d["fingerprint"].pop("backend"), "fingerprint"),
    (lambda d: d["layer_models"]["roofline"].pop("default"), "layer_models"),
    (lambda d: d["layer_models"]["refined_roofline"]["conv"].update(peak_ops_s="fast"),
     "layer_models.refined_roofline.conv"),
    (lambda d: d["layer_models"].update(magic={}), "layer_models.magic"),
    (lambda d: d.update(model_preference=["statistical"]), "model_preference"),
    (lambda d: d["mapping"].append({"primary": "conv"}), "mapping[8]"),
    (lambda d: d.update(overhead_ms=-1), "overhead_ms"),
])
def test_corrupt_or_wrong_version_profile_names_file_and_field(tmp_path, mutate, field):
    data = json.loads((load_profile("ncs2-myriad").source and open(load_profile("ncs2-myriad").source).read()))
    mutate(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(path) in str(info.value) and field in str(info.value)


def test_profile_that_is_not_json_names_the_file(tmp_path):
    path = tmp_path / "garbage.json"
    path.write_text("{not json")
    with pytest.raises(ProfileError, match="garbage.json.*JSON"):
        load_profile(path)


def test_profile_round_trips_through_save(tmp_path, resnet18_graph):
    profile = load_profile("zcu102-dpu")
    copy = load_profile(profile.save(tmp_path / "copy.json"))
    assert copy.to_dict() == profile.to_dict()
    assert Estimator(copy)(resnet18_graph) == Estimator(profile)(resnet18_graph)


def test_cli_estimate_prints_table_and_total_and_writes_csv_and_plot(tmp_path, capsys):
    csv, png = tmp_path / "k.csv", tmp_path / "k.png"
    assert cli_main(["estimate", "torchvision:resnet18", "--profile", "zcu102-dpu",
                     "--csv", str(csv), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "layer1_0_conv1" in out and "total:" in out and "zcu102-dpu" in out
    assert csv.read_text().startswith("kernel,kind,layers")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_reports_bad_input_shape_and_unknown_profile(capsys):
    assert cli_main(["estimate", "torchvision:resnet18", "--input-shape", "1,4,224,224"]) == 2
    err = capsys.readouterr().err
    assert "conv1" in err and "(1, 4, 224, 224)" in err and "Traceback" not in err
    assert cli_main(["estimate", "torchvision:resnet18", "--profile", "nope"]) == 2
    assert "available" in capsys.readouterr().err


def test_cli_python_file_factory(tmp_path, capsys):
    source = tmp_path / "net.py"
    source.write_text("import torch.nn as nn\n"
                      "def build():\n    return nn.Sequential(nn.Conv1d(4, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 30, 2))\n")
    assert cli_main(["estimate", f"{source}:build", "--input-shape", "2,4,32"]) == 0
    assert "total:" in capsys.readouterr().out


def test_cli_profiles_lists_fingerprints(capsys):
    assert cli_main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "zcu102-dpu" in out and "openvino-cpu (default)" in out and "backend=" in out


def test_save_is_atomic_readable_and_leaves_no_temporary_files(tmp_path):
    profile = load_profile("zcu102-dpu")
    path = profile.save(tmp_path / "sub" / "p.json")
    assert sorted(p.name for p in path.parent.iterdir()) == ["p.json"]
    assert path.stat().st_mode & 0o044  # readable by others, like any file the user writes
    profile.fit_metrics["bad"] = object()  # not JSON: the old file must survive untouched
    with pytest.raises(TypeError):
        profile.save(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["p.json"]
    assert load_profile(path).name == "zcu102-dpu"


def test_builtin_name_wins_over_a_same_named_folder(tmp_path, monkeypatch):
    (tmp_path / "ncs2-myriad").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_profile("ncs2-myriad").name == "ncs2-myriad"


def test_estimator_passes_trace_options_through():
    class Opaque(nn.Module):
        def forward(self, x):
            return x * 2

    model = nn.Sequential(nn.Conv2d(3, 3, 1), Opaque())
    report = Estimator("zcu102-dpu").report(model, input_shape=(1, 3, 8, 8), leaf_modules=(Opaque,))
    assert "unknown" in set(report["kind"])


def test_openvino_profile_costs_the_reorder_of_a_returned_feature_map():
    """OpenVINO converts a returned conv-derived map from its own layout to NCHW (a
    segmentation head's 21 channels at 320x320 took 8 ms of 30): a kernel of its own."""
    assert load_profile("openvino-cpu").reorders_outputs and not load_profile("onnxruntime-cpu").reorders_outputs
    graph = trace(nn.Sequential(nn.Conv2d(3, 21, 1), nn.Upsample(scale_factor=4, mode="bilinear")),
                  input_shape=(1, 3, 40, 40))
    estimator = Estimator("openvino-cpu")
    report = estimator.report(graph)
    (row,) = report[report["kind"] == "output_reorder"].itertuples()
    assert row.output_shape == (1, 21, 160, 160) and row.layers == "" and row.time_ms > 0
    assert row.profile_entry == "output_reorder"                       # fitted on the store's reorders
    assert report.attrs["total_ms"] == pytest.approx(estimator(graph))
    assert "output_reorder" in set(Estimator("openvino-cpu", use_mapping=False).report(graph)["kind"])  # not a fusion

"""annette_torch.integrations.nn_meter: nn-Meter's predictor interface gives the
Estimator's numbers for torch modules and ONNX files, and refuses what it cannot answer
with errors that say what to do."""
from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

from annette_torch import Estimator, ProfileError
from annette_torch.graph import import_onnx
from annette_torch.integrations.nn_meter import (NN_METER_PREDICTORS, LatencyPredictor, list_latency_predictors,
                                                 load_latency_predictor)
from annette_torch.profiles import builtin_names
from annette_torch.profiles.profile import builtin_dir

# The TorchScript exporter warns that it is deprecated and about constant folding.
pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning:torch"),
              pytest.mark.filterwarnings("ignore::UserWarning:torch")]

SHAPE = (1, 3, 32, 32)


def small_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()


def export(path, dynamic_batch: bool = False) -> str:
    axes = {"input": {0: "batch"}} if dynamic_batch else None
    torch.onnx.export(small_net(), torch.zeros(SHAPE), str(path), dynamo=False, input_names=["input"],
                      dynamic_axes=axes)
    return str(path)


def test_torch_model_gives_the_estimators_number():
    model = small_net()
    expected = Estimator("openvino-cpu")(model, input_shape=SHAPE)
    predictor = load_latency_predictor("openvino-cpu")
    assert isinstance(predictor, LatencyPredictor) and predictor.name == "openvino-cpu"
    assert predictor.predict(model, "torch", input_shape=SHAPE) == expected > 0   # nn-Meter's call
    assert predictor.predict(model, input_shape=list(SHAPE)) == expected          # model_type defaults to torch
    assert predictor.predict(model, "torch", SHAPE, apply_nni=True) == expected   # accepted, changes nothing


def test_a_profile_path_and_its_name_give_the_same_predictor():
    model = small_net()
    by_path = load_latency_predictor(str(builtin_dir() / "torch-cpu.json"))
    assert by_path.predict(model, "torch", SHAPE) == load_latency_predictor("torch-cpu").predict(model, "torch", SHAPE)


def test_onnx_file_and_model_proto_give_the_estimators_number_at_their_declared_shape(tmp_path):
    path = export(tmp_path / "small.onnx")
    expected = Estimator("openvino-cpu")(import_onnx(path))
    predictor = load_latency_predictor("openvino-cpu")
    assert predictor.predict(path, "onnx") == expected > 0   # nn-Meter's default 224x224 input_shape: not used
    assert predictor.predict(tmp_path / "small.onnx", model_type="onnx") == expected
    assert predictor.predict(onnx.load(path), "onnx") == expected


def test_a_dynamic_onnx_input_takes_input_shape(tmp_path):
    path = export(tmp_path / "dynamic.onnx", dynamic_batch=True)
    predictor = load_latency_predictor("openvino-cpu")
    batch4 = predictor.predict(path, "onnx", input_shape=(4, 3, 32, 32))
    assert batch4 == Estimator("openvino-cpu")(import_onnx(path, input_shape=(4, 3, 32, 32)))
    assert batch4 > predictor.predict(path, "onnx", input_shape=SHAPE)


@pytest.mark.parametrize("model_type", ["pb", "nni-ir", "nnmeter-ir", "keras"])
def test_other_model_types_are_refused_naming_the_supported_ones(model_type):
    predictor = load_latency_predictor("openvino-cpu")
    with pytest.raises(ValueError, match=rf"model_type '{model_type}' is not supported.*'torch', 'onnx'.*nn.Module"):
        predictor.predict(small_net(), model_type)


def test_a_model_of_the_wrong_type_is_refused_with_the_right_model_type(tmp_path):
    predictor = load_latency_predictor("openvino-cpu")
    with pytest.raises(TypeError, match=r"model_type='torch' takes an nn.Module, got str \(an ONNX file: model_type='onnx'\)"):
        predictor.predict(str(tmp_path / "small.onnx"), "torch")
    with pytest.raises(TypeError, match=r"model_type='onnx' takes an ONNX file path.*got Sequential.*model_type='torch'"):
        predictor.predict(small_net(), "onnx")
    with pytest.raises(ValueError, match=r"ONNX file .*missing\.onnx does not exist"):
        predictor.predict(str(tmp_path / "missing.onnx"), "onnx")
    with pytest.raises(TypeError, match="apply_nni must be True or False"):
        predictor.predict(small_net(), "torch", SHAPE, apply_nni="yes")


@pytest.mark.parametrize("name", sorted(NN_METER_PREDICTORS))
def test_nn_meter_predictor_names_say_they_are_not_calibrated_here_and_list_the_profiles(name):
    with pytest.raises(ProfileError, match=rf"'{name}' is an nn-Meter predictor .*no calibration") as raised:
        load_latency_predictor(name)
    assert all(profile in str(raised.value) for profile in builtin_names())
    with pytest.raises(ProfileError, match="nn-Meter predictor"):
        load_latency_predictor(name.upper())   # nn-Meter's names are matched case-insensitively


def test_the_nn_meter_myriad_predictor_points_to_the_ncs2_profile():
    with pytest.raises(ProfileError, match="'ncs2-myriad' is the same device"):
        load_latency_predictor("myriadvpu_openvino2019r2", 1.0)


def test_unknown_names_and_versions_are_clear_errors():
    with pytest.raises(ProfileError, match=r"unknown profile 'no-such-device'; available: .*openvino-cpu"):
        load_latency_predictor("no-such-device")
    with pytest.raises(ProfileError, match=r"profile 'openvino-cpu' has one version, '2026\.4\.1.*predictor_version=1\.0"):
        load_latency_predictor("openvino-cpu", predictor_version=1.0)
    with pytest.raises(ProfileError, match="has one version"):
        load_latency_predictor("openvino-cpu", "2026.41")   # not a version-component boundary
    with pytest.raises(TypeError, match="predictor_name must be a profile name or path"):
        load_latency_predictor(None)


def test_a_profiles_own_runtime_version_is_accepted():
    version = next(p["version"] for p in list_latency_predictors() if p["name"] == "openvino-cpu")
    for wanted in (version, "2026.4", "2026"):
        assert load_latency_predictor("openvino-cpu", wanted).name == "openvino-cpu"


def test_list_latency_predictors_lists_the_builtin_profiles_as_nn_meter_does():
    listed = list_latency_predictors()
    assert [p["name"] for p in listed] == builtin_names()
    assert all(set(p) == {"name", "version", "category", "description"} for p in listed)
    category = {p["name"]: p["category"] for p in listed}
    assert category["openvino-cpu"] == "cpu" and category["torch-cpu"] == "cpu"
    assert category["ncs2-myriad"] == "vpu" and category["zcu102-dpu"] == "dpu"

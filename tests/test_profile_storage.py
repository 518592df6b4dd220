"""Profile storage (version 2): tree-ensemble arrays in a digest-named .npz beside the JSON,
read without unpickling, validated with errors that name file and field; version-1
profiles (trees inline in the JSON) still load; the statistical set ships only where the
model preference reaches it; the installed package stays within its size budget."""
import hashlib
import importlib.util
import io
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torchvision

from annette_torch import Estimator, ProfileError, load_profile, trace
from annette_torch.fit.generate import STATISTICAL_NOTE, without_unreached_statistical
from annette_torch.layer_models import Mixed, RefinedRoofline, Statistical
from annette_torch.layer_models.regressors import REGRESSION_INPUTS, LinearRegressor
from annette_torch.profiles import Profile

_spec = importlib.util.spec_from_file_location("speed", Path(__file__).parents[1] / "benchmarks" / "speed.py")
speed = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("speed", speed)
_spec.loader.exec_module(speed)

SHIPPED = "torch-cpu-train"      # the smallest shipped profile with tree ensembles
PACKAGE_BUDGET_BYTES = 6_000_000


@pytest.fixture(scope="module")
def graph():
    return trace(torchvision.models.mobilenet_v2().eval(), input_shape=(1, 3, 224, 224))


@pytest.fixture
def saved(tmp_path):
    """(JSON path, arrays path) of the shipped profile saved into ``tmp_path``."""
    path = load_profile(SHIPPED).save(tmp_path / "p.json")
    return path, path.parent / json.loads(path.read_text())["arrays"]["file"]


def same(a, b) -> bool:
    """Equal nested data, numpy arrays equal in dtype and values."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    return a == b


def rewrite_arrays(json_path: Path, arrays_path: Path, change) -> None:
    """Apply ``change`` to the dict of arrays, write them back as a plain .npz (np.savez)
    and record the new digest in the JSON, as a careless tool would."""
    with np.load(arrays_path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    change(arrays)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    arrays_path.write_bytes(buffer.getvalue())
    data = json.loads(json_path.read_text())
    data["arrays"]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    json_path.write_text(json.dumps(data))


def first_tree_key(arrays: dict) -> str:
    """The key prefix (``layer_models.<type>.<kind>.regressor``) of the first tree ensemble."""
    return next(key for key in sorted(arrays) if key.endswith(".regressor.left")).removesuffix(".left")


def tree_model(profile: Profile):
    """A mixed layer model of ``profile`` whose regressor is a tree ensemble."""
    return next(m for m in profile.layer_models["mixed"].values() if hasattr(m.regressor, "feature"))


def test_saved_profile_is_a_json_and_its_arrays_and_round_trips_exactly(saved, graph):
    path, arrays_path = saved
    original, loaded = load_profile(SHIPPED), load_profile(path)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, arrays_path.name])
    assert arrays_path.name == f"p.{hashlib.sha256(arrays_path.read_bytes()).hexdigest()[:16]}.npz"
    assert same(loaded.to_dict(), original.to_dict())
    assert Estimator(loaded).report(graph)["time_ms"].tolist() == Estimator(original).report(graph)["time_ms"].tolist()
    regressor = tree_model(loaded).regressor.to_dict()
    assert regressor["threshold"].dtype == np.float32 and regressor["value"].dtype == np.float64
    assert regressor["feature"].dtype == np.int8 and regressor["left"].dtype.itemsize <= 2
    assert load_profile(path).save(path) == path and sorted(p.name for p in path.parent.iterdir()) == \
        sorted([path.name, arrays_path.name])                       # same arrays, same file


def test_saving_other_arrays_replaces_the_previous_arrays_file(saved):
    path, arrays_path = saved
    profile = load_profile(path)
    trees = tree_model(profile).regressor
    trees.value[trees.feature < 0] *= 2
    profile.save(path)
    files = sorted(p.name for p in path.parent.iterdir())
    assert len(files) == 2 and arrays_path.name not in files
    assert tree_model(load_profile(path)).regressor.value.tolist() == trees.value.tolist()


def test_arrays_are_read_without_unpickling_an_object_array(saved):
    path, arrays_path = saved

    def pickled(arrays):
        key = first_tree_key(arrays) + ".value"
        arrays[key] = np.array([{"evil": 1}] * len(arrays[key]), dtype=object)

    rewrite_arrays(path, arrays_path, pickled)
    with pytest.raises(ProfileError, match=r"not a plain numeric array .*allow_pickle=False") as info:
        load_profile(path)
    assert str(arrays_path) in str(info.value) and ".regressor.value" in str(info.value)


@pytest.mark.parametrize("change, problem", [
    (lambda a, k: a[k + ".left"].__setitem__(0, a[k + ".nodes"][0]), r"'left': a child index is not after its parent"),
    (lambda a, k: a[k + ".right"].__setitem__(0, a[k + ".left"][0]), r"not the child of exactly one inner node"),
    (lambda a, k: a[k + ".feature"].__setitem__(0, len(REGRESSION_INPUTS)), r"'feature': an index outside"),
    (lambda a, k: a[k + ".threshold"].__setitem__(0, np.nan), r"must be finite numbers"),
    (lambda a, k: a.__setitem__(k + ".value", a[k + ".value"][:-1]), r"'value' must hold one entry per leaf"),
    (lambda a, k: a.__setitem__(k + ".feature", a[k + ".feature"].astype(float)), r"'feature' must be a 1-D array of integer"),
    (lambda a, k: a.__setitem__(k + ".nodes", a[k + ".nodes"][None]), r"'nodes' must be a 1-D array"),
])
def test_corrupt_or_out_of_bounds_arrays_name_the_files_and_the_field(saved, change, problem):
    path, arrays_path = saved
    fields = []
    rewrite_arrays(path, arrays_path, lambda arrays: (fields.append(first_tree_key(arrays)),
                                                      change(arrays, first_tree_key(arrays))))
    with pytest.raises(ProfileError, match=problem) as info:
        load_profile(path)
    field = fields[0].removesuffix(".regressor")            # layer_models.<type>.<kind>
    assert str(path) in str(info.value) and str(arrays_path) in str(info.value) and field in str(info.value)


def test_missing_damaged_or_foreign_arrays_file_is_a_clear_error(saved, tmp_path):
    path, arrays_path = saved
    rewrite_arrays(path, arrays_path, lambda arrays: arrays.pop(sorted(arrays)[0]))
    with pytest.raises(ProfileError, match=r"field 'layer_models\..*': no such array in"):
        load_profile(path)

    path = load_profile(SHIPPED).save(tmp_path / "q.json")
    arrays_path = next(tmp_path.glob("q.*.npz"))
    blob = bytearray(arrays_path.read_bytes())
    blob[len(blob) // 2] ^= 1
    arrays_path.write_bytes(bytes(blob))
    with pytest.raises(ProfileError, match=r"q\.json: field 'arrays': .*q\..*\.npz is not the arrays file .*SHA-256"):
        load_profile(path)
    arrays_path.unlink()
    with pytest.raises(ProfileError, match=r"cannot read .*q\..*\.npz.*copy both"):
        load_profile(path)

    data = json.loads(path.read_text())
    data["arrays"]["file"] = "../elsewhere.npz"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=r"field 'arrays': expected .*a \.npz file name beside the profile"):
        load_profile(path)


def test_a_copied_or_renamed_profile_finds_its_arrays(saved, tmp_path):
    path, arrays_path = saved
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(path, tmp_path / "elsewhere" / "renamed.json")
    shutil.copy(arrays_path, tmp_path / "elsewhere" / arrays_path.name)
    assert load_profile(tmp_path / "elsewhere" / "renamed.json").name == SHIPPED


def version_1(data: dict) -> dict:
    """``data`` (a profile's to_dict) in the version-1 layout: trees inline as node lists."""
    data = {**data, "version": 1}
    for entries in data["layer_models"].values():
        for entry in entries.values():
            regressor = entry.get("regressor", {})
            if regressor.get("type") != "trees":
                continue
            nodes, feature = regressor.pop("nodes"), regressor.pop("feature")
            inner = feature >= 0
            full = {key: np.zeros(len(feature)) for key in ("threshold", "left", "right", "value")}
            for key in ("threshold", "left", "right"):
                full[key][inner] = regressor.pop(key)
            full["value"][~inner] = regressor.pop("value")
            bounds = np.cumsum(nodes)[:-1]
            regressor["trees"] = [{"feature": f.tolist(), "threshold": t.tolist(), "left": l.astype(int).tolist(),
                                   "right": r.astype(int).tolist(), "value": v.tolist()}
                                  for f, t, l, r, v in zip(np.split(feature, bounds), *(np.split(full[key], bounds)
                                                           for key in ("threshold", "left", "right", "value")))]
    return data


def test_version_1_profile_with_inline_trees_still_loads_and_estimates_the_same(tmp_path, graph):
    profile = load_profile(SHIPPED)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(version_1(profile.to_dict())))
    old = load_profile(path)
    assert Estimator(old).report(graph)["time_ms"].tolist() == Estimator(profile).report(graph)["time_ms"].tolist()
    assert same(old.to_dict(), profile.to_dict())
    data = version_1(profile.to_dict())
    next(e for e in data["layer_models"]["mixed"].values() if "regressor" in e)["regressor"]["trees"][0]["left"][0] = 10 ** 6
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=r"old\.json: field layer_models\.mixed\..*child index"):
        load_profile(path)


def _learned_profile(statistical_kinds, mixed_kinds) -> Profile:
    roof = RefinedRoofline(peak_ops_s=1e11, bandwidth_bytes_s=1e11)
    flat = LinearRegressor(np.zeros(len(REGRESSION_INPUTS)), 0.0)
    return Profile(name="learned", fingerprint={"backend": "none", "device": "none", "runtime_version": "0",
                                                "threads": 1, "precision": "f32"},
                   layer_models={"roofline": {"default": roof}, "refined_roofline": {"default": roof},
                                 "statistical": {k: Statistical(roof, flat) for k in statistical_kinds},
                                 "mixed": {k: Mixed(roof, flat) for k in mixed_kinds}},
                   model_preference=("mixed", "statistical", "refined_roofline", "roofline"))


def test_statistical_set_is_kept_only_where_the_model_preference_reaches_it():
    covered = without_unreached_statistical(_learned_profile(["conv", "linear"], ["conv", "linear"]))
    assert "statistical" not in covered.layer_models and "statistical" not in covered.model_preference
    assert covered.notes[-1] == STATISTICAL_NOTE
    reached = _learned_profile(["conv", "linear"], ["conv"])             # only statistical answers linear
    assert reached.reaches("statistical") and without_unreached_statistical(reached) is reached


def test_shipped_profiles_without_statistical_models_say_how_to_get_them():
    with pytest.raises(ValueError, match=r"has no 'statistical' layer models") as info:
        Estimator("torch-cpu", model_type="statistical")
    message = str(info.value)
    assert "`annette-torch fit --data STORE --out DIR --with-statistical`" in message
    assert "with_statistical=True" in message and "(torch-cpu-1t-f32-" in message and "calibration/data" in message


def test_installed_package_fits_its_size_budget():
    files = speed.installed_files()
    names = {f.relative_to(speed.ROOT).as_posix() for f in files}
    assert "annette_torch/estimator.py" in names and "annette_torch/profiles/builtin/torch-cpu.json" in names
    assert any(n.startswith("annette_torch/profiles/builtin/torch-cpu.") and n.endswith(".npz") for n in names)
    total = sum(f.stat().st_size for f in files)
    assert total <= PACKAGE_BUDGET_BYTES, f"installed package is {total / 1e6:.2f} MB, over its 6 MB budget"

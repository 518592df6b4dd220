"""Bad input never becomes a wrong number: a battery of bad or unusual inputs, and the tally.

    python benchmarks/bad_input.py            # one line per case that is not handled well, then the tally
    python benchmarks/bad_input.py --all      # every case with its answer

Each case feeds annette_torch one bad or unusual input (a profile field that is NaN, a
store file cut in the middle, a sweep row with one cell, ``--timeout 0``, a board user
that would reach ssh as an option, a 2-input model given 3 shapes, ...) through the
Python API or the command line, and says what a good answer is:

* ``error``: an exception (or, on the command line, exit code 2) whose message holds
  every fragment of ``match`` (the file, the field, the rule);
* ``warning``: a warning of the case's category whose message holds them (the warning
  is raised as an error, so long work after it does not run);
* ``check``: the case returns True (a property: the user's module is unchanged, ssh gets
  ``--`` before its destination, nothing was written outside ``--out``).

:func:`judge` grades each answer: *handled well* (as expected), *poor message* (an error
or warning of the right kind whose message lacks a fragment, or another exit code), or
*bug* (accepted silently, a NaN or infinite result, or a raw ``KeyError``,
``AttributeError``, ``zlib.error``, ... from inside a library). ``tests/test_bad_input.py``
runs the same cases and requires every one to be handled well.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import tempfile
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from annette_torch import Estimator, ModelStateWarning, trace  # noqa: E402
from annette_torch.layer_models.regressors import REGRESSION_INPUTS  # noqa: E402

#: exceptions that are a bug whatever they say: library internals, not an answer
BUG_TYPES = (KeyError, AttributeError, IndexError, RecursionError, ZeroDivisionError, zlib.error, EOFError,
             NameError, UnboundLocalError, AssertionError, MemoryError)
VERDICTS = ("handled well", "poor message", "bug")
SHIPPED_STORE = ROOT / "calibration" / "data" / "torch-cpu-1t-f32-2.14.1+cu130-c13e1653"


@dataclass(frozen=True)
class Case:
    """One bad input: ``run(folder)`` feeds it (``folder``: a fresh scratch folder) and
    ``expect`` says what a good answer is (see the module doc)."""

    surface: str
    name: str
    run: Callable[[Path], Any]
    expect: str = "error"
    match: tuple[str, ...] = ()
    warning: type[Warning] = UserWarning


class CliExit(Exception):
    """The command line exited non-zero: its code and what it printed on stderr."""

    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(stderr.strip())
        self.code = code


def judge(case: Case, folder: Path) -> tuple[str, str]:
    """(verdict, what happened) for one case run in ``folder``."""
    def has_fragments(text: str) -> bool:
        return all(fragment in text for fragment in case.match)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case.expect == "warning":
            warnings.simplefilter("error", case.warning)
        try:
            result = case.run(folder)
        except Warning as warning:
            if isinstance(warning, case.warning) and has_fragments(str(warning)):
                return "handled well", f"{type(warning).__name__}: {warning}"
            return "poor message", f"{type(warning).__name__}: {warning}"
        except CliExit as error:
            if case.expect == "error" and error.code == 2 and has_fragments(str(error)):
                return "handled well", f"exit 2: {error}"
            return "poor message", f"exit {error.code}: {error}"
        except SystemExit as error:
            return "poor message", f"SystemExit {error.code}"
        except Exception as error:  # noqa: BLE001 - grading every answer is the point
            text = f"{type(error).__name__}: {error}"
            if isinstance(error, BUG_TYPES):
                return "bug", text
            if case.expect == "error" and has_fragments(str(error)):
                return "handled well", text
            return "poor message", text
    if case.expect == "check":
        return ("handled well", "holds") if result is True else ("bug", f"does not hold ({result!r})")
    if case.expect == "warning":
        return "bug", f"no {case.warning.__name__} (returned {result!r})"
    if isinstance(result, float) and not math.isfinite(result):
        return "bug", f"returned {result}"
    return "bug", f"accepted silently (returned {_short(result)}; warnings: {[str(w.message)[:80] for w in caught]})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


def cli(*argv: str) -> str:
    """Run ``annette-torch argv``; its stdout, or :class:`CliExit` when it exits non-zero."""
    from annette_torch.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    except SystemExit as exit_:          # argparse's usage errors
        code = exit_.code if isinstance(exit_.code, int) else 2
    if code:
        raise CliExit(code, err.getvalue())
    return out.getvalue()


# --- fixtures ------------------------------------------------------------------------------

ROOF = {"peak_ops_s": 1e11, "bandwidth_bytes_s": 1e10, "bit_act": 32, "bit_weights": 32}


def base_profile() -> dict:
    """A small valid profile: every layer-model type, a linear and a (version-1 inline)
    tree regressor, one fusion rule."""
    refined = {**ROOF, "unroll": {"c": {"par": 8, "alpha": 0.5}}}
    linear = {"type": "linear", "inputs": list(REGRESSION_INPUTS), "coef": [0.0] * len(REGRESSION_INPUTS),
              "intercept": 0.0}
    trees = {"type": "trees", "inputs": list(REGRESSION_INPUTS), "base": 0.0, "depth": 1,
             "trees": [{"feature": [0, -1, -1], "threshold": [1.0, 0.0, 0.0], "left": [1, -1, -1],
                        "right": [2, -1, -1], "value": [0.0, 0.1, -0.1]}]}
    return {"format": "annette_torch.profile", "version": 2, "name": "bad",
            "fingerprint": {"backend": "test", "device": "x", "runtime_version": "1", "threads": 1,
                            "precision": "f32"},
            "overhead_ms": 0.1, "kernel_overhead_ms": 0.0,
            "layer_models": {"roofline": {"default": dict(ROOF), "conv": dict(ROOF)},
                             "refined_roofline": {"conv": refined},
                             "mixed": {"conv": {"roofline": refined, "regressor": linear}},
                             "statistical": {"linear": {"roofline": refined, "regressor": trees}}},
            "model_preference": ["mixed", "statistical", "refined_roofline", "roofline"],
            "mapping": [{"primary": "conv", "secondary": "relu", "result": "conv"}]}


def write_profile(folder: Path, change: Callable[[dict], Any] | None = None, text: str | None = None) -> Path:
    """The base profile, changed in place by ``change`` (or ``text`` as the file), as a file."""
    data = base_profile()
    if change is not None:
        change(data)
    path = folder / "bad.json"
    path.write_text(text if text is not None else json.dumps(data))
    return path


def small_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10)).eval()


def estimate_with(change: Callable[[dict], Any], method: str = "__call__") -> Callable[[Path], Any]:
    """A case that estimates :func:`small_net` with the base profile changed by ``change``."""
    def run(folder: Path) -> Any:
        estimator = Estimator(write_profile(folder, change))
        if method == "report":
            return estimator.report(small_net(), input_shape=(1, 3, 16, 16))["time_ms"].sum()
        return estimator(small_net(), input_shape=(1, 3, 16, 16))
    return run


def set_field(path: str, value: Any) -> Callable[[dict], None]:
    """A change that sets the dotted ``path`` of a profile dict (list indices as numbers)."""
    def change(data: dict) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        for key in parents:
            data = data[key]
        data[last] = value
    return change


def drop_field(path: str) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        *parents, last = path.split(".")
        for key in parents:
            data = data[key]
        del data[last]
    return change


def load(change: Callable[[dict], Any] | None = None, text: str | None = None) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        from annette_torch.profiles import load_profile
        return load_profile(write_profile(folder, change, text))
    return run


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x, y):
        return self.conv(x) + y


class Branchy(nn.Module):
    """Data-dependent control flow: FX cannot trace it, the eager fallbacks run."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y.relu() if y.sum() > 0 else y


class NoMetaKernel(nn.Module):
    """``nonzero`` has no meta kernel (its output size depends on the data)."""

    def forward(self, x):
        return x.flatten().nonzero().float().sum() + x.mean()


class SideEffects(nn.Module):
    """A forward that counts its calls in an attribute and a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.register_buffer("seen", torch.zeros(1))
        self.calls = 0

    def forward(self, x):
        self.seen.add_(1)
        self.calls += 1
        return self.conv(x)


class ReturnsBoth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return y, torch.relu(y)


def untouched(model_class: type[nn.Module], shape: tuple[int, ...]) -> Callable[[Path], bool]:
    def run(folder: Path) -> bool:
        model = model_class().eval()
        state, calls = {k: v.clone() for k, v in model.state_dict().items()}, getattr(model, "calls", None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Estimator("openvino-cpu")(model, input_shape=shape)
        same = all(torch.equal(state[k], v) for k, v in model.state_dict().items())
        return same and getattr(model, "calls", None) == calls
    return run


def returned_output_not_fused(folder: Path) -> bool:
    table = Estimator("openvino-cpu").report(ReturnsBoth().eval(), input_shape=(1, 3, 8, 8))
    return not any("+" in layers for layers in table["layers"])


def trace_case(model: Callable[[], nn.Module], **kwargs: Any) -> Callable[[Path], Any]:
    return lambda folder: trace(model(), **kwargs)


def estimate_model(model: Callable[[], nn.Module], **kwargs: Any) -> Callable[[Path], Any]:
    return lambda folder: Estimator("openvino-cpu")(model(), **kwargs)


def onnx_file(folder: Path) -> Path:
    """A small conv network exported to ONNX (3 input channels)."""
    from annette_torch.backends import export_onnx

    path = folder / "net.onnx"
    export_onnx(small_net(), (1, 3, 16, 16), path)
    return path


def onnx_case(input_shape: Any = None, path: Callable[[Path], Path] = onnx_file) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        from annette_torch.graph import import_onnx
        return import_onnx(path(folder), input_shape=input_shape)
    return run


FINGERPRINT = {"backend": "torch-cpu", "runtime_version": "1", "cpu": "test cpu", "threads": 1, "precision": "f32"}


def make_store(folder: Path, benchmarks: int = 2) -> Path:
    """A store folder with ``benchmarks`` ok benchmarks of one layer row each."""
    from annette_torch.calibration.store import MeasurementStore

    with MeasurementStore.open(folder / "stores", FINGERPRINT) as store:
        for i in range(benchmarks):
            store.append({"benchmark": f"b{i}", "family": "conv2d", "spec": "{}", "status": "ok", "time_ms": 1.5,
                          "layers_sum_ms": 1.0, "kernels": 1},
                         [{"layer": "conv", "status": "executed", "time_ms": 1.0, "spread": 0.01}])
        return store.folder


def tampered_store(tamper: Callable[[Path], Any], compact: bool = False) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        from annette_torch.calibration.store import MeasurementStore

        store = make_store(folder, 3)
        if compact:
            with MeasurementStore.open(store.parent, FINGERPRINT) as opened:
                opened.compact()
        tamper(store)
        return store
    return build


def read_store(build: Callable[[Path], Path]) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        from annette_torch.calibration import load_measurements
        return load_measurements(build(folder))
    return run


def resume_store(build: Callable[[Path], Path]) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        from annette_torch.calibration.store import MeasurementStore
        with MeasurementStore.open(build(folder).parent, FINGERPRINT) as store:
            return store.done()
    return run


def half_line(store: Path) -> None:
    lines = (store / "layers.csv").read_text().splitlines(keepends=True)
    lines.insert(2, lines[1][: len(lines[1]) // 2] + "\n")
    (store / "layers.csv").write_text("".join(lines))


def spec_text(spec: Any) -> Callable[[Path], None]:
    """A tamper that gives benchmark b0 the spec ``spec`` (JSON text or data)."""
    def tamper(store: Path) -> None:
        from annette_torch.calibration.store import NETWORK_COLUMNS, _rewrite, read_table
        networks = read_table(store / "networks.csv", NETWORK_COLUMNS)[0]
        networks.loc[networks["benchmark"] == "b0", "spec"] = spec if isinstance(spec, str) else json.dumps(spec)
        _rewrite(store / "networks.csv", networks, NETWORK_COLUMNS)
    return tamper


def write_fingerprint(data: Any) -> Callable[[Path], None]:
    return lambda store: (store / "fingerprint.json").write_text(data if isinstance(data, str) else json.dumps(data))


def fit_store(build: Callable[[Path], Path], **options: Any) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        from annette_torch.fit import fit_profile
        return fit_profile(build(folder), **options)
    return run


def shipped_store(folder: Path) -> Path:
    return SHIPPED_STORE


def sweep_case(text: str) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        from annette_torch.calibration import load_sweep
        path = folder / "bad.csv"
        path.write_text(text)
        return load_sweep(path)
    return run


SWEEP_HEADER = "family,count,n,h,w,c,f,k,stride,groups,op,pool\n"


def campaign(**options: Any) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        from annette_torch.calibration import run_campaign
        return run_campaign("torch-cpu", "smoke", folder / "out", progress=False, **options)
    return run


def nothing_stored(**options: Any) -> Callable[[Path], bool]:
    def run(folder: Path) -> bool:
        with contextlib.suppress(ValueError):
            campaign(**options)(folder)
        return not (folder / "out").exists()
    return run


def descriptor(data: Any) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        from annette_torch.transfer import DeviceDescriptor
        path = folder / "device.json"
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return DeviceDescriptor.load(path)
    return run


def zero_shot(data: dict) -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        path = folder / "device.json"
        path.write_text(json.dumps(data))
        return cli("adapt", "--descriptor", str(path), "--from", "openvino-cpu", "--out", str(folder / "p.json"))
    return run


def board(section: str) -> Callable[[Path], Any]:
    """An ssh from a board configuration whose [board] section is ``section``."""
    def run(folder: Path) -> Any:
        from annette_torch.backends.remote import BoardConfig, Ssh
        path = folder / "board.toml"
        path.write_text("[board]\n" + section + "\n")
        return Ssh.from_config(BoardConfig(path, "zcu102.example.toml"))
    return run


def ssh_end_of_options(folder: Path) -> bool:
    from annette_torch.backends.remote import Ssh
    ssh = Ssh(host="board", user="root")
    commands = [ssh.run("ls", 5, "list"), ssh.upload(["a.txt"], "/tmp", 5), ssh.download(["/tmp/a"], ".", 5)]
    return all(c.argv.index("--") < next(i for i, a in enumerate(c.argv) if "root@board" in a) for c in commands)


def python_file(body: str, name: str = "net.py") -> Callable[[Path], str]:
    def write(folder: Path) -> str:
        path = folder / name
        path.write_text(body)
        return str(path)
    return write


NET_PY = ("import torch\nfrom torch import nn\n"
          "def make():\n    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())\n"
          "def broken():\n    raise RuntimeError('no such checkpoint')\n"
          "def text():\n    return 'resnet'\n")


def estimate_cli(*options: str, model: str = "{net}:make") -> Callable[[Path], Any]:
    def run(folder: Path) -> Any:
        net = python_file(NET_PY)(folder)
        spec = model.format(net=net, folder=folder)
        return cli("estimate", spec, *(o.format(net=net, folder=folder) for o in options))
    return run


def nested(depth: int) -> str:
    """The base profile's text with ``notes`` nested ``depth`` lists deep."""
    return json.dumps(base_profile()).replace('"name": "bad"', '"name": "bad", "notes": ' + "[" * depth + "]" * depth)


@contextlib.contextmanager
def file_limit(limit: int):
    from annette_torch import validation
    old, validation.MAX_FILE_BYTES = validation.MAX_FILE_BYTES, limit
    try:
        yield
    finally:
        validation.MAX_FILE_BYTES = old


def too_large(folder: Path) -> Any:
    path = write_profile(folder)
    with file_limit(100):
        from annette_torch.profiles import load_profile
        return load_profile(path)


def few_samples(folder: Path) -> Any:
    from annette_torch.transfer import Sample, adapt_profile
    graph = trace(small_net(), input_shape=(1, 3, 16, 16))
    return adapt_profile("openvino-cpu", [Sample(graph, 1.0)])


def sample_nan(folder: Path) -> Any:
    from annette_torch.transfer import Sample
    return Sample(trace(small_net(), input_shape=(1, 3, 16, 16)), float("nan"))


def adaptation_inf(folder: Path) -> Any:
    from annette_torch.layer_models.adapted import Adaptation
    return Adaptation(compute_scale=float("inf"))


def _nan_overhead_in_memory(folder: Path) -> Any:
    import dataclasses
    from annette_torch.profiles import load_profile
    profile = dataclasses.replace(load_profile(write_profile(folder)), overhead_ms=float("nan"))
    return Estimator(profile)(small_net(), input_shape=(1, 3, 16, 16))


def save_invalid(folder: Path) -> Any:
    import dataclasses
    from annette_torch.profiles import load_profile
    profile = dataclasses.replace(load_profile(write_profile(folder)), overhead_ms=float("nan"))
    try:
        return profile.save(folder / "out.json")
    finally:
        if (folder / "out.json").exists():
            raise AssertionError("an invalid profile was written")


def fit_cli_outside_out(folder: Path) -> bool:
    store = make_store(folder)
    (store / "fingerprint.json").write_text(json.dumps({**FINGERPRINT, "backend": str(folder / "escaped")}))
    with contextlib.suppress(CliExit):
        cli("fit", "--data", str(store), "--out", str(folder / "out"))
    return not (folder / "escaped.json").exists() and not list(folder.glob("**/escaped*"))


def repaired_on_resume(folder: Path) -> bool:
    from annette_torch.calibration.store import MeasurementStore
    store = tampered_store(half_line)(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with MeasurementStore.open(store.parent, FINGERPRINT) as opened:    # the half line was b0's
            done = opened.done()
        with MeasurementStore.open(store.parent, FINGERPRINT) as opened:
            again = opened.done()
    lines = (store / "layers.csv").read_text().splitlines()
    return done == again == {"b1", "b2"} and len(lines) == 3 and all(line.count(",") == 25 for line in lines)


# --- the cases -----------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
P = "bad.json"       # the profile file every profile case names


def _profile_cases() -> list[Case]:
    fields = [   # (field path, value, fragments besides the file)
        ("overhead_ms", NAN, "'overhead_ms'"), ("overhead_ms", "1.5", "'overhead_ms'"),
        ("overhead_ms", -1.0, "'overhead_ms'"), ("overhead_ms", True, "'overhead_ms'"),
        ("kernel_overhead_ms", INF, "'kernel_overhead_ms'"), ("version", True, "'version'"),
        ("version", 3, "'version'"), ("format", "onnx", "'format'"),
        ("weight_bandwidth_bytes_s", 0, "'weight_bandwidth_bytes_s'"),
        ("weight_bandwidth_bytes_s", NAN, "'weight_bandwidth_bytes_s'"),
        ("optimizes_graph", "true", "'optimizes_graph'"), ("fused_cost_s_per_elem", {"silu": [1e-10]}, "silu"),
        ("fused_cost_s_per_elem", {"silu": "1e-10"}, "silu"), ("counting", {"ops_scale": {"max_pool": 0}}, "ops_scale"),
        ("mapping", {"primary": "conv"}, "'mapping'"), ("mapping.0", "conv+relu", "mapping[0]"),
        ("mapping.0.condition", [{"layer": "secondary", "attr": "kernel_size", "op": "in", "value": 3}], "'in'"),
        ("mapping.0.condition", [{"layer": "secondary", "attr": "kernel_size", "op": "<", "value": "3"}], "'<'"),
        ("mapping.0.condition", [{"layer": "secondary", "attr": "kernel_size", "op": "~=", "value": 3}], "op"),
        ("mapping.0.condition", [{"layer": "secondary", "attr": "kernel_size", "op": "==", "value": NAN}], "value"),
        ("mapping.0.primary", 7, "primary"), ("model_preference", ["fastest"], "'model_preference'"),
        ("layer_models.roofline.default.peak_ops_s", INF, "peak_ops_s"),
        ("layer_models.roofline.default.peak_ops_s", 0, "peak_ops_s"),
        ("layer_models.roofline.default.peak_ops_s", "1e12", "peak_ops_s"),
        ("layer_models.roofline.conv.bandwidth_bytes_s", NAN, "bandwidth_bytes_s"),
        ("layer_models.roofline.conv.bit_act", 1.5, "bit_act"),
        ("layer_models.roofline.conv.bit_weights", True, "bit_weights"),
        ("layer_models.refined_roofline.conv.unroll", {"c": {"par": 0.5, "alpha": 0.5}}, "unroll.c.par"),
        ("layer_models.refined_roofline.conv.unroll", {"c": {"par": 8, "alpha": 2}}, "unroll.c.alpha"),
        ("layer_models.refined_roofline.conv.unroll", {"z": {"par": 8, "alpha": 0.5}}, "'z'"),
        ("layer_models.refined_roofline.conv.replicate", "yes", "replicate"),
        ("layer_models.mixed.conv.regressor.intercept", NAN, "intercept"),
        ("layer_models.mixed.conv.regressor.intercept", "0.5", "intercept"),
        ("layer_models.mixed.conv.regressor.coef", [0.0, 1.0], "coef"),
        ("layer_models.mixed.conv.regressor.coef", ["0"] * len(REGRESSION_INPUTS), "coef"),
        ("layer_models.mixed.conv.regressor.type", "forest", "regressor"),
        ("layer_models.mixed.conv.regressor.inputs", ["log_ops"], "inputs"),
        ("layer_models.statistical.linear.regressor.base", INF, "base"),
        ("layer_models.statistical.linear.regressor.trees.0.feature", [1.5, -1, -1], "'feature'"),
        ("layer_models.statistical.linear.regressor.trees.0.feature", [999, -1, -1], "'feature'"),
        ("layer_models.statistical.linear.regressor.trees.0.threshold", [NAN, 0.0, 0.0], "'threshold'"),
        ("layer_models.statistical.linear.regressor.depth", 4, "depth"),
        ("layer_models.statistical.linear.regressor.trees.0.left", [0, -1, -1], "'left'"),
        ("layer_models.conv_models", {}, "conv_models"), ("layer_models.roofline.conv.range", {"c": [32, 8]}, "range"),
        ("layer_models.roofline.conv.range", {"c": [1, NAN]}, "range"),
        ("adaptation", {"compute_scale": INF}, "adaptation.compute_scale"),
        ("adaptation", {"exponent": 0}, "adaptation.exponent"),
        ("training", {"optimizer_step": {"sgd": {"per_tensor_ms": NAN, "per_element_ns": 0.3}}}, "per_tensor_ms"),
        ("notes", "a note", "'notes'"),
    ]
    cases = [Case("profile", f"{path} = {value!r}", load(set_field(path, value)), match=(P, fragment))
             for path, value, fragment in fields]
    cases += [
        Case("profile", "no fingerprint", load(drop_field("fingerprint")), match=(P, "'fingerprint'")),
        Case("profile", "fingerprint without backend", load(drop_field("fingerprint.backend")),
             match=(P, "fingerprint", "backend")),
        Case("profile", "no roofline default", load(drop_field("layer_models.roofline.default")),
             match=(P, "layer_models", "default")),
        Case("profile", "JSON nested 10000 deep", load(text=nested(10000)), match=(P, "nested")),
        Case("profile", "JSON nested 100 deep", load(text=nested(100)), match=(P, "nested")),
        Case("profile", "not JSON", load(text="{'format': 1"), match=(P, "not readable as JSON")),
        Case("profile", "a folder as the profile", lambda f: Estimator(str(f) + "/"), match=("is a folder",)),
        Case("profile", "missing profile file", lambda f: Estimator(str(f / "none.json")),
             match=("none.json", "does not exist")),
        Case("profile", "file over the size limit", too_large, match=(P, "bytes, more than")),
        Case("profile", "arrays file outside the folder",
             load(set_field("arrays", {"file": "../x.npz", "sha256": "0" * 64})), match=(P, "'arrays'")),
        Case("profile", "save of an invalid profile writes nothing", save_invalid, match=("out.json", "overhead_ms")),
    ]
    return cases


def _estimate_cases() -> list[Case]:
    tiny_peak = set_field("layer_models.refined_roofline.conv.peak_ops_s", 1e-300)
    tiny_mixed_peak = set_field("layer_models.mixed.conv.roofline.peak_ops_s", 1e-300)
    overflowing = set_field("layer_models.mixed.conv.regressor.intercept", 1e6)
    return [
        Case("estimate", "peak 1e-300 -> infinite kernel time", estimate_with(tiny_mixed_peak),
             match=("kernel", "layer_models.mixed.conv", P)),
        Case("estimate", "regressor overflows exp()", estimate_with(overflowing),
             match=("kernel", "layer_models.mixed.conv")),
        Case("estimate", "report with an infinite kernel", estimate_with(overflowing, "report"),
             match=("kernel", "layer_models.mixed.conv")),
        Case("estimate", "refined roofline peak 1e-300 (model_type)",
             lambda f: Estimator(write_profile(f, tiny_peak), model_type="refined_roofline")(
                 small_net(), input_shape=(1, 3, 16, 16)), match=("layer_models.refined_roofline.conv",)),
        Case("estimate", "training step with an infinite kernel",
             lambda f: Estimator(write_profile(f, lambda d: (tiny_mixed_peak(d), d.update(training={
                 "optimizer_step": {"sgd": {"per_tensor_ms": 0.01, "per_element_ns": 0.3}}})))).training_step(
                 small_net().train(), input_shape=(1, 3, 16, 16)), match=("kernel", "layer_models.mixed.conv")),
        Case("estimate", "a Profile built in Python with overhead_ms NaN", _nan_overhead_in_memory,
             match=("overhead_ms", "nan")),
        Case("estimate", "2-input model given 3 shapes",
             estimate_model(TwoInputs, input_shape=[(1, 3, 8, 8)] * 3), match=("TwoInputs", "2 input", "3 were given")),
        Case("estimate", "1-input model given 2 shapes",
             estimate_model(small_net, input_shape=[(1, 3, 16, 16)] * 2), match=("1 input", "2 were given")),
        Case("estimate", "input_shape with example_inputs",
             estimate_model(small_net, input_shape=(1, 3, 16, 16), example_inputs=torch.zeros(1, 3, 16, 16)),
             match=("input_shape", "example_inputs", "not both")),
        Case("estimate", "input_shape (True, 3, 16, 16)", estimate_model(small_net, input_shape=(True, 3, 16, 16)),
             match=("positive integers", "True")),
        Case("estimate", "input_shape with 0", estimate_model(small_net, input_shape=(1, 3, 0, 16)),
             match=("positive integers",)),
        Case("estimate", "input_shape with -2", estimate_model(small_net, input_shape=(1, 3, -2, 16)),
             match=("positive integers",)),
        Case("estimate", "input_shape with 1.5", estimate_model(small_net, input_shape=(1.5, 3, 16, 16)),
             match=("positive integers",)),
        Case("estimate", "input_shape as text", estimate_model(small_net, input_shape="1,3,16,16"),
             match=("input_shape",)),
        Case("estimate", "input_shape ()", estimate_model(small_net, input_shape=()), match=("input_shape",)),
        Case("estimate", "no input at all", estimate_model(small_net), match=("input_shape",)),
        Case("estimate", "5 channels into a 3-channel conv", estimate_model(small_net, input_shape=(1, 5, 16, 16)),
             match=("layer", "[1, 5, 16, 16]")),
        Case("estimate", "model in train mode", estimate_model(lambda: small_net().train(), input_shape=(1, 3, 16, 16)),
             expect="warning", match=("train mode", "model.eval()"), warning=ModelStateWarning),
        Case("estimate", "float16 model on an f32 profile",
             estimate_model(lambda: small_net().half(), input_shape=(1, 3, 16, 16)), expect="warning",
             match=("float16", "f32"), warning=ModelStateWarning),
        Case("estimate", "bfloat16 model on an f32 profile",
             estimate_model(lambda: small_net().bfloat16(), input_shape=(1, 3, 16, 16)), expect="warning",
             match=("bfloat16", "f32"), warning=ModelStateWarning),
        Case("estimate", "a function instead of a module", estimate_model(lambda: torch.relu, input_shape=(1, 3)),
             match=("nn.Module",)),
        Case("estimate", "leaf_modules of instances",
             estimate_model(small_net, input_shape=(1, 3, 16, 16), leaf_modules=(nn.ReLU(),)), match=("leaf_modules",)),
        Case("estimate", "unknown built-in profile", lambda f: Estimator("openvino-gpu"), match=("openvino-gpu",)),
        Case("estimate", "a model type the profile lacks", lambda f: Estimator("ncs2-myriad", model_type="mixed"),
             match=("mixed",)),
        Case("estimate", "model_type that is no type", lambda f: Estimator("openvino-cpu", model_type="fastest"),
             match=("fastest",)),
        Case("estimate", "a NaN measured time for adaptation", sample_nan, match=("measured_ms",)),
        Case("estimate", "an infinite adaptation scale", adaptation_inf, match=("adaptation.compute_scale",)),
        Case("estimate", "adapting to one measured network", few_samples, expect="warning",
             match=("1 measured network",), warning=_warning("annette_torch.transfer", "FewSamplesWarning")),
        Case("trace", "forward mutates a buffer and an attribute (FX)", untouched(SideEffects, (1, 3, 8, 8)),
             expect="check"),
        Case("trace", "data-dependent forward mutates nothing (eager)", untouched(Branchy, (1, 3, 8, 8)), expect="check"),
        Case("trace", "a returned output is not fused away", returned_output_not_fused, expect="check"),
        Case("resources", "data-dependent model at 1x3x8192x8192", trace_case(Branchy, input_shape=(1, 3, 8192, 8192)),
             match=("Branchy", "MiB", "leaf_modules=")),
        Case("resources", "no meta kernel at 1x3x4096x4096", trace_case(NoMetaKernel, input_shape=(1, 3, 4096, 4096)),
             match=("NoMetaKernel", "MiB", "leaf_modules=")),
        Case("resources", "data-dependent activations over the limit",
             trace_case(lambda: Branchy(channels=80), input_shape=(1, 3, 2048, 2048)),
             match=("Branchy", "activations alive at the failing call", "leaf_modules=")),
        Case("resources", "estimate --input-shape of 825 GB allocates nothing",
             lambda f: "ms" in estimate_cli("--input-shape", "1,3,262144,262144")(f), expect="check"),
        Case("resources", "meta example inputs: the real fallback makes its zeros",
             lambda f: trace(NoMetaKernel(), example_inputs=torch.zeros(1, 3, 8, 8, device="meta")).method == "fx-real",
             expect="check"),
        Case("resources", "meta example inputs over the real fallback's limit",
             trace_case(NoMetaKernel, example_inputs=torch.zeros(1, 3, 8192, 8192, device="meta")),
             match=("NoMetaKernel", "MiB", "leaf_modules=")),
    ]


def _warning(module: str, name: str) -> type[Warning]:
    import importlib
    return getattr(importlib.import_module(module), name)


def _onnx_cases() -> list[Case]:
    return [
        Case("onnx", "input channels contradict the first conv", onnx_case((1, 5, 16, 16)),
             match=("net", "5 channels", "3")),
        Case("onnx", "input shape of another rank", onnx_case((1, 3, 16)), match=("rank",)),
        Case("onnx", "two shapes for one input", onnx_case([(1, 3, 16, 16)] * 2), match=("1 input", "2 shape")),
        Case("onnx", "input shape with 0", onnx_case((1, 3, 0, 16)), match=("positive integers",)),
        Case("onnx", "missing file", onnx_case(path=lambda f: f / "none.onnx"), match=("none.onnx", "does not exist")),
        Case("onnx", "a folder as the file", onnx_case(path=lambda f: f), match=("is a folder",)),
        Case("onnx", "not an ONNX file",
             onnx_case(path=lambda f: (f / "x.onnx").write_bytes(b"garbage") and f / "x.onnx"),
             match=("x.onnx", "not a readable ONNX model")),
    ]


def _store_cases() -> list[Case]:
    def damage_gzip(store: Path) -> None:
        (store / "layers.csv.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")

    def truncate_gzip(store: Path) -> None:
        data = (store / "networks.csv.gz").read_bytes()
        (store / "networks.csv.gz").write_bytes(data[: len(data) // 2])

    def drop_column(store: Path) -> None:
        text = (store / "networks.csv").read_text().replace("time_ms,", "", 1)
        (store / "networks.csv").write_text(text)

    def word_for_number(store: Path) -> None:
        text = (store / "networks.csv").read_text().replace(",1.5,", ",fast,", 1)
        (store / "networks.csv").write_text(text)

    def cut_last(store: Path) -> None:
        text = (store / "networks.csv").read_text()
        (store / "networks.csv").write_text(text[:-5])

    def not_utf8(store: Path) -> None:
        (store / "layers.csv").write_bytes((store / "layers.csv").read_bytes() + b"b9,\xff\xfe\n")

    def failed_only(store: Path) -> None:
        text = (store / "networks.csv").read_text().replace(",ok,", ",failed,")
        (store / "networks.csv").write_text(text)

    repair = _warning("annette_torch.calibration.store", "StoreRepairWarning")
    few = _warning("annette_torch.fit", "FewBenchmarksWarning")
    cases = [
        Case("store", "damaged gzip archive", read_store(tampered_store(damage_gzip, compact=True)),
             match=("layers.csv.gz", "damaged")),
        Case("store", "truncated gzip archive", read_store(tampered_store(truncate_gzip, compact=True)),
             match=("networks.csv.gz", "damaged")),
        Case("store", "a half line in the middle of layers.csv", read_store(tampered_store(half_line)),
             expect="warning", match=("layers.csv", "line(s): 3"), warning=repair),
        Case("store", "a half line, resumed", resume_store(tampered_store(half_line)), expect="warning",
             match=("layers.csv", "line(s): 3"), warning=repair),
        Case("store", "resume drops the half line for good", repaired_on_resume, expect="check"),
        Case("store", "a word in a number column", read_store(tampered_store(word_for_number)), expect="warning",
             match=("networks.csv", "not a number"), warning=repair),
        Case("store", "a last line cut off", read_store(tampered_store(cut_last)), expect="warning",
             match=("networks.csv", "cut off"), warning=repair),
        Case("store", "a missing column", read_store(tampered_store(drop_column)), match=("networks.csv", "time_ms")),
        Case("store", "bytes that are not UTF-8", read_store(tampered_store(not_utf8)), match=("layers.csv", "UTF-8")),
        Case("store", "no fingerprint.json", read_store(tampered_store(lambda s: (s / "fingerprint.json").unlink())),
             match=("fingerprint.json",)),
        Case("store", "fingerprint not JSON", read_store(tampered_store(write_fingerprint("{backend"))),
             match=("fingerprint.json", "JSON")),
        Case("store", "fingerprint threads '1'", read_store(tampered_store(write_fingerprint({**FINGERPRINT,
                                                                                            "threads": "1"}))),
             match=("fingerprint.json", "'threads'")),
        Case("store", "fingerprint a list", read_store(tampered_store(write_fingerprint([1, 2]))),
             match=("fingerprint.json", "object")),
        Case("store", "stores on a damaged store", lambda f: cli("stores", str(tampered_store(damage_gzip, True)(f))),
             match=("layers.csv.gz",)),
        Case("store", "stores on a missing folder", lambda f: cli("stores", str(f / "none")), match=("none",)),
        Case("security", "fit: store backend '/abs/path'",
             fit_store(tampered_store(write_fingerprint({**FINGERPRINT, "backend": "/tmp/evil"}))),
             match=("fingerprint.json", "'backend'", "/tmp/evil")),
        Case("security", "fit: store backend '../../x'",
             fit_store(tampered_store(write_fingerprint({**FINGERPRINT, "backend": "../../x"}))),
             match=("'backend'", "../../x")),
        Case("security", "fit: store backend 'a/b'",
             fit_store(tampered_store(write_fingerprint({**FINGERPRINT, "backend": "a/b"}))), match=("'backend'",)),
        Case("security", "fit: --name '../evil'", fit_store(shipped_store, name="../evil", first=60),
             match=("profile name", "../evil")),
        Case("security", "fit command writes nothing outside --out", fit_cli_outside_out, expect="check"),
        Case("fit", "a benchmark spec that is not JSON", fit_store(tampered_store(spec_text('{family'))),
             match=("networks.csv", "'b0'", "spec")),
        Case("fit", "a benchmark spec of 10**7 channels",
             fit_store(tampered_store(spec_text({"family": "conv2d", "params": {"c": 10 ** 7, "f": 10 ** 7, "h": 64,
                                                                                  "k": 3}}))),
             match=("networks.csv", "'b0'", "operations")),
        Case("fit", "a benchmark of an unknown family",
             fit_store(tampered_store(spec_text({"family": "conv9d", "params": {}}))), match=("'b0'", "conv9d")),
        Case("fit", "only failed benchmarks", fit_store(tampered_store(failed_only)),
             match=("no successfully measured",)),
        Case("fit", "15 benchmarks", fit_store(shipped_store, first=15), expect="warning",
             match=("15", "held out"), warning=few),
        Case("fit", "--test-share 0 (none held out)", fit_store(shipped_store, first=15, test_share=0.0),
             expect="warning", match=("0 held out",), warning=few),
        Case("fit", "--test-share 1", fit_store(shipped_store, test_share=1.0), match=("test_share",)),
        Case("fit", "--test-share -0.1", fit_store(shipped_store, test_share=-0.1), match=("test_share",)),
        Case("fit", "fit --test-share 1 on the command line",
             lambda f: cli("fit", "--data", str(SHIPPED_STORE), "--out", str(f), "--test-share", "1"),
             match=("test_share",)),
    ]
    return cases


def _sweep_cases() -> list[Case]:
    return [
        Case("sweep", "a row with one cell", sweep_case(SWEEP_HEADER + "conv2d\n"), match=("bad.csv", "row 1", "cell")),
        Case("sweep", "a row with too many cells", sweep_case(SWEEP_HEADER + "conv2d,1,,8,8,8,8,3,1,,,,,9\n"),
             match=("row 1", "cell")),
        Case("sweep", "an unknown family", sweep_case(SWEEP_HEADER + "conv9d,1,,8,8,8,8,3,1,,,\n"),
             match=("row 1", "conv9d")),
        Case("sweep", "another header", sweep_case("family,count,h\nconv2d,1,8\n"), match=("bad.csv", "header")),
        Case("sweep", "an empty range", sweep_case(SWEEP_HEADER + "conv2d,1,,8,8,64..8,8,3,1,,,\n"),
             match=("row 1", "empty")),
        Case("sweep", "count 'x'", sweep_case(SWEEP_HEADER + "conv2d,x,,8,8,8,8,3,1,,,\n"), match=("row 1", "'x'")),
        Case("sweep", "count 0", sweep_case(SWEEP_HEADER + "conv2d,0,,8,8,8,8,3,1,,,\n"), match=("row 1", "count")),
        Case("sweep", "count 10**9", sweep_case(SWEEP_HEADER + "conv2d,1000000000,,8,8,8,8,3,1,,,\n"),
             match=("row 1", "count")),
        Case("sweep", "grid step 0", sweep_case(SWEEP_HEADER + "conv2d,1,,8,8,8..64:0,8,3,1,,,\n"),
             match=("row 1", "step")),
        Case("sweep", "a grid of 10**8 values", sweep_case(SWEEP_HEADER + "conv2d,1,,8,8,1..100000000:1,8,3,1,,,\n"),
             match=("row 1", "values")),
        Case("sweep", "max_ops nan", sweep_case("# max_ops: nan\n" + SWEEP_HEADER + "conv2d,1,,8,8,8,8,3,1,,,\n"),
             match=("bad.csv", "max_ops")),
        Case("sweep", "a folder as the sweep", lambda f: _load_sweep(f / "sweep.csv", folder=True),
             match=("sweep.csv", "folder")),
        Case("sweep", "missing sweep file", lambda f: _load_sweep(f / "none.csv"), match=("none.csv", "does not exist")),
    ]


def _load_sweep(path: Path, folder: bool = False) -> Any:
    from annette_torch.calibration import load_sweep
    if folder:
        path.mkdir()
    return load_sweep(path)


def _campaign_cases() -> list[Case]:
    return [
        Case("campaign", "--timeout 0", campaign(timeout_s=0), match=("--timeout", "positive")),
        Case("campaign", "--timeout nan", campaign(timeout_s=NAN), match=("--timeout",)),
        Case("campaign", "--warmup -3", campaign(warmup=-3), match=("warmup",)),
        Case("campaign", "--repeats 0", campaign(repeats=0), match=("repeats",)),
        Case("campaign", "--minutes -1", campaign(minutes=-1), match=("--minutes",)),
        Case("campaign", "--minutes nan", campaign(minutes=NAN), match=("--minutes",)),
        Case("campaign", "--threads 0", campaign(threads=0), match=("--threads",)),
        Case("campaign", "--rounds 0", campaign(rounds=0), match=("rounds",)),
        Case("campaign", "--statistic mode", campaign(statistic="mode"), match=("statistic",)),
        Case("campaign", "--timeout 0 stores nothing", nothing_stored(timeout_s=0), expect="check"),
        Case("campaign", "--timeout 0.001 (in range, every round times out)", campaign(timeout_s=0.001),
             match=("stopped the campaign", "--timeout 0.001 s is shorter")),
        Case("campaign", "--stop-after-failures -1", campaign(stop_after_failures=-1),
             match=("--stop-after-failures",)),
        Case("campaign", "calibrate --warmup -3 on the command line",
             lambda f: cli("calibrate", "--backend", "torch-cpu", "--sweep", "smoke", "--out", str(f / "o"),
                           "--warmup", "-3"), match=("warmup", "-3")),
        Case("campaign", "calibrate --minutes -1 on the command line",
             lambda f: cli("calibrate", "--backend", "torch-cpu", "--sweep", "smoke", "--out", str(f / "o"),
                           "--minutes", "-1"), match=("--minutes",)),
        Case("campaign", "calibrate --timeout 0 on the command line",
             lambda f: cli("calibrate", "--backend", "torch-cpu", "--sweep", "smoke", "--out", str(f / "o"),
                           "--timeout", "0"), match=("--timeout",)),
        Case("campaign", "calibrate a missing sweep file",
             lambda f: cli("calibrate", "--backend", "torch-cpu", "--sweep", str(f / "none.csv"), "--out",
                           str(f / "o")), match=("none.csv", "does not exist")),
    ]


def _adapt_cases() -> list[Case]:
    device = {"runtime": "openvino-cpu", "precision": "f32", "threads": 1}
    return [
        Case("descriptor", "peak_ops_s 1e-300", descriptor({**device, "peak_ops_s": 1e-300}),
             match=("device.json", "peak_ops_s")),
        Case("descriptor", "peak_ops_s NaN", descriptor({**device, "peak_ops_s": NAN}), match=("peak_ops_s",)),
        Case("descriptor", "peak_ops_s 1e30", descriptor({**device, "peak_ops_s": 1e30}), match=("peak_ops_s",)),
        Case("descriptor", "bandwidth 'fast'", descriptor({**device, "memory_bandwidth_bytes_s": "fast"}),
             match=("memory_bandwidth_bytes_s",)),
        Case("descriptor", "frequency 0", descriptor({**device, "frequency_hz": 0}), match=("frequency_hz",)),
        Case("descriptor", "threads 0", descriptor({**device, "threads": 0}), match=("'threads'",)),
        Case("descriptor", "threads true", descriptor({**device, "threads": True}), match=("'threads'",)),
        Case("descriptor", "precision f64", descriptor({**device, "precision": "f64"}), match=("'precision'",)),
        Case("descriptor", "an unknown field", descriptor({**device, "cores": 4}), match=("'cores'",)),
        Case("descriptor", "no runtime", descriptor({"precision": "f32"}), match=("'runtime'",)),
        Case("descriptor", "not JSON", descriptor("{runtime"), match=("device.json", "JSON")),
        Case("descriptor", "nested 1000 deep", descriptor("[" * 1000 + "]" * 1000), match=("device.json", "nested")),
        Case("descriptor", "adapt --descriptor with peak 1e-300 writes nothing",
             zero_shot({**device, "peak_ops_s": 1e-300}), match=("peak_ops_s",)),
        Case("descriptor", "adapt --descriptor with --samples",
             lambda f: cli("adapt", "--descriptor", "d.json", "--samples", "3", "--out", str(f / "p.json")),
             match=("--descriptor",)),
        Case("descriptor", "adapt without --from or --backend", lambda f: cli("adapt", "--out", str(f / "p.json")),
             match=("--from",)),
    ]


def _board_cases() -> list[Case]:
    good = 'host = "zcu102.local"\nuser = "root"'
    return [
        Case("security", "[board] user = '-oProxyCommand=...'",
             board('host = "zcu102.local"\nuser = "-oProxyCommand=touch /tmp/pwned"'), match=("board.toml", "user")),
        Case("security", "[board] host = '-oProxyCommand=...'",
             board('host = "-oProxyCommand=touch /tmp/pwned"\nuser = "root"'), match=("board.toml", "host")),
        Case("security", "ssh and scp get -- before their destination", ssh_end_of_options, expect="check"),
        Case("board", "host with a space", board('host = "zcu102 local"\nuser = "root"'), match=("host",)),
        Case("board", "user with an @", board('host = "zcu102.local"\nuser = "root@evil"'), match=("user",)),
        Case("board", "port 70000", board(good + "\nport = 70000"), match=("port",)),
        Case("board", "port 0", board(good + "\nport = 0"), match=("port",)),
        Case("board", "connect_timeout_s = nan", board(good + "\nconnect_timeout_s = nan"),
             match=("board.toml", "connect_timeout_s")),
        Case("board", "connect_timeout_s = -1", board(good + "\nconnect_timeout_s = -1"), match=("connect_timeout_s",)),
        Case("board", "host a number", board('host = 10\nuser = "root"'), match=("host",)),
        Case("board", "no user", board('host = "zcu102.local"'), match=("user",)),
        Case("board", "not TOML", board('host = "zcu102.local'), match=("board.toml", "TOML")),
        Case("board", "a folder as the config", lambda f: _board_config(f), match=("is a folder",)),
        Case("board", "missing config", lambda f: _board_config(f / "none.toml"), match=("none.toml", "does not exist")),
    ]


def _board_config(path: Path) -> Any:
    from annette_torch.backends.remote import BoardConfig
    return BoardConfig(path, "zcu102.example.toml")


def measured_table(fingerprint: str | None = None, kernels: bytes | None = None,
                   record: str | None = None) -> Callable[[Path], Any]:
    """A case that loads a table of kernels measured in context whose ``fingerprint.json``,
    ``kernels.csv`` and ``protocol.json`` hold the given text (a valid table otherwise)."""
    def run(folder: Path) -> Any:
        from annette_torch.measure.kernel_table import KERNEL_COLUMNS, MeasuredKernels
        table = folder / "measured"
        table.mkdir()
        (table / "fingerprint.json").write_text(fingerprint if fingerprint is not None else json.dumps(FINGERPRINT))
        (table / "kernels.csv").write_bytes(kernels if kernels is not None else (",".join(KERNEL_COLUMNS) + "\n").encode())
        if record == "folder":
            (table / "protocol.json").mkdir()
        elif record is not None:
            (table / "protocol.json").write_text(record)
        return MeasuredKernels.load(table)
    return run


def measured_over_limit(name: str) -> Callable[[Path], Any]:
    """A case that loads a measured-kernels table whose ``name`` file is 1,000 bytes longer
    than the reader's size limit (the other files fit under it)."""
    from annette_torch.measure.kernel_table import KERNEL_COLUMNS
    header = ",".join(KERNEL_COLUMNS) + "\n"
    record = json.dumps({"statistic": "p10", "drift": "none", "canary": None, "canary_ms": None, "since": None})
    limit = 1000

    def run(folder: Path) -> Any:
        with file_limit(limit):
            if name == "protocol.json":
                return measured_table(record=record + " " * 2 * limit)(folder)
            return measured_table(kernels=(header + "\n" * 2 * limit).encode(), record=record)(folder)
    return run


def _measured_cases() -> list[Case]:
    from annette_torch.measure.kernel_table import KERNEL_COLUMNS
    header = ",".join(KERNEL_COLUMNS)
    record = '{"statistic": "p10", "drift": "none", "canary_ms": %s}'
    return [
        Case("measured", "fingerprint.json nested 1000 deep", measured_table(fingerprint="[" * 1000 + "]" * 1000),
             match=("fingerprint.json", "nested")),
        Case("measured", "fingerprint.json not JSON", measured_table(fingerprint="{backend"),
             match=("fingerprint.json", "JSON")),
        Case("measured", "kernels.csv over the size limit", measured_over_limit("kernels.csv"),
             match=("kernels.csv", "bytes, more than")),
        Case("measured", "kernels.csv not UTF-8", measured_table(kernels=(header + "\n\xff\xfe\n").encode("latin-1")),
             match=("kernels.csv", "UTF-8")),
        Case("measured", "kernels.csv with a NUL byte in a quoted field",
             measured_table(kernels=(header + '\n"a\x00\n').encode()), match=("kernels.csv", "line")),
        Case("measured", "protocol.json nested 1000 deep", measured_table(record="[" * 1000 + "]" * 1000),
             match=("protocol.json", "nested")),
        Case("measured", "protocol.json over the size limit", measured_over_limit("protocol.json"),
             match=("protocol.json", "bytes, more than")),
        Case("measured", "protocol.json is a folder", measured_table(record="folder"),
             match=("protocol.json", "is a folder")),
        Case("measured", "protocol.json canary_ms NaN", measured_table(record=record % "NaN"),
             match=("protocol.json", "'canary_ms'")),
        Case("measured", "protocol.json canary_ms true", measured_table(record=record % "true"),
             match=("protocol.json", "'canary_ms'")),
    ]


def width_latency(multipliers: Any, change: Callable[[dict], Any] | None = None) -> Callable[[Path], Any]:
    """A case that evaluates :class:`~annette_torch.nas.WidthLatency` of :func:`small_net`
    at ``multipliers`` (the base profile changed by ``change``, or openvino-cpu)."""
    def run(folder: Path) -> Any:
        from annette_torch.nas import WidthLatency
        estimator = Estimator(write_profile(folder, change) if change else "openvino-cpu")
        graph = trace(small_net(), input_shape=(1, 3, 16, 16))
        return float(WidthLatency(estimator, graph)(torch.tensor(multipliers, dtype=torch.float64)))
    return run


def cached_block(change: Callable[[dict], Any]) -> Callable[[Path], Any]:
    """A case that costs :func:`small_net` as one block of a :class:`SignatureCache`."""
    def run(folder: Path) -> Any:
        from annette_torch.nas import SignatureCache
        return SignatureCache(Estimator(write_profile(folder, change))).block("net", small_net, (1, 3, 16, 16)).time_ms
    return run


def lut(table: list[list[float]], valid: list[list[bool]] | None = None, fixed_ms: float = 0.0,
        logits: list[list[float]] | None = None, tau: float = 1.0, **loss: Any) -> Callable[[Path], Any]:
    """A case that builds a :class:`~annette_torch.nas.LatencyLUT` from ``table`` and, with
    ``logits``, takes its expected latency at ``tau`` (with ``loss`` options: a
    :class:`~annette_torch.nas.LatencyLoss`'s value)."""
    def run(folder: Path) -> Any:
        from annette_torch.nas import LatencyLoss, LatencyLUT
        times = torch.tensor(table, dtype=torch.float64)
        mask = torch.ones_like(times, dtype=torch.bool) if valid is None else torch.tensor(valid)
        built = LatencyLUT(times, mask, fixed_ms)
        if loss:
            return float(LatencyLoss(built, **loss)(torch.tensor(1.0), torch.zeros_like(times)))
        return float(built.expected_ms(torch.tensor(logits, dtype=torch.float64), tau)) if logits else built
    return run


def _nas_cases() -> list[Case]:
    from annette_torch.nas import LatencyLUT
    tiny_peak = set_field("layer_models.mixed.conv.roofline.peak_ops_s", 1e-300)
    good = [[1.0, 2.0], [3.0, 4.0]]
    return [
        Case("nas", "width multiplier NaN", width_latency([NAN]), match=("multiplier 0", "nan")),
        Case("nas", "width multiplier -0.5", width_latency([-0.5]), match=("multiplier 0", "positive")),
        Case("nas", "width multiplier inf", width_latency([INF]), match=("multiplier 0", "inf")),
        Case("nas", "width multiplier 0", width_latency([0.0]), match=("multiplier 0", "positive")),
        Case("nas", "width latency with a peak of 1e-300", width_latency([1.0], tiny_peak),
             match=("kernel", "layer_models.mixed.conv", P)),
        Case("nas", "signature-cache block with a peak of 1e-300", cached_block(tiny_peak),
             match=("kernel", "layer_models.mixed.conv", P)),
        Case("nas", "LUT entry NaN", lut([[1.0, NAN], [3.0, 4.0]]), match=("table_ms[0, 1]", "nan")),
        Case("nas", "LUT entry negative", lut([[1.0, 2.0], [-3.0, 4.0]]), match=("table_ms[1, 0]", ">= 0")),
        Case("nas", "LUT entry inf", lut([[INF, 2.0], [3.0, 4.0]]), match=("table_ms[0, 0]", "finite")),
        Case("nas", "LUT invalid entry NaN gives a finite expectation",
             lambda f: math.isfinite(lut([[1.0, NAN], [3.0, 4.0]], valid=[[True, False], [True, True]],
                                         logits=[[0.0, 0.0], [0.0, 0.0]])(f)), expect="check"),
        Case("nas", "LUT fixed_ms NaN", lut(good, fixed_ms=NAN), match=("fixed_ms",)),
        Case("nas", "LUT mask of another shape", lut(good, valid=[[True, True]]), match=("valid", "shape")),
        Case("nas", "LUT position without a valid candidate", lut(good, valid=[[True, True], [False, False]]),
             match=("position 1", "no valid candidate")),
        Case("nas", "LUT built from no positions", lambda f: LatencyLUT.build(None, []),
             match=("at least one position",)),
        Case("nas", "expected latency at NaN logits", lut(good, logits=[[0.0, NAN], [0.0, 0.0]]),
             match=("logits[0, 1]", "NaN")),
        Case("nas", "expected latency at +inf logits", lut(good, logits=[[0.0, 0.0], [INF, 0.0]]),
             match=("logits[1, 0]", "+inf")),
        Case("nas", "expected latency with a position all -inf", lut(good, logits=[[0.0, 0.0], [-INF, -INF]]),
             match=("position 1", "-inf")),
        Case("nas", "expected latency at tau 0", lut(good, logits=[[0.0, 0.0], [0.0, 0.0]], tau=0.0),
             match=("tau", "positive")),
        Case("nas", "latency loss with target_ms NaN", lut(good, target_ms=NAN), match=("target_ms",)),
        Case("nas", "latency loss with target_ms 0", lut(good, target_ms=0.0), match=("target_ms", "positive")),
        Case("nas", "latency loss with weight -1", lut(good, weight=-1.0), match=("weight",)),
    ]


def _cli_cases() -> list[Case]:
    nan_profile = lambda f: str(write_profile(f, set_field("overhead_ms", NAN)))   # noqa: E731
    inf_profile = lambda f: str(write_profile(f, set_field("layer_models.mixed.conv.roofline.peak_ops_s", 1e-300)))  # noqa: E731
    return [
        Case("cli", "estimate --profile FOLDER", estimate_cli("--profile", "{folder}/"), match=("is a folder",)),
        Case("cli", "estimate --profile with overhead_ms NaN",
             lambda f: cli("estimate", python_file(NET_PY)(f) + ":make", "--input-shape", "1,3,16,16", "--profile",
                           nan_profile(f)), match=(P, "'overhead_ms'")),
        Case("cli", "estimate with a profile giving an infinite kernel",
             lambda f: cli("estimate", python_file(NET_PY)(f) + ":make", "--input-shape", "1,3,16,16", "--profile",
                           inf_profile(f)), match=("kernel", "layer_models.mixed.conv")),
        Case("cli", "estimate --input-shape 1,3,x", estimate_cli("--input-shape", "1,3,x"), match=("1,3,x",)),
        Case("cli", "estimate --input-shape 1,3,0,0", estimate_cli("--input-shape", "1,3,0,0"),
             match=("positive integers",)),
        Case("cli", "estimate --seq-len 0", estimate_cli("--seq-len", "0"), match=("--seq-len",)),
        Case("cli", "estimate a factory that raises", estimate_cli(model="{net}:broken"),
             match=("net.py:broken()", "no such checkpoint")),
        Case("cli", "estimate a factory returning text", estimate_cli(model="{net}:text"), match=("net.py:text()",)),
        Case("cli", "estimate a file that does not import",
             lambda f: cli("estimate", python_file("import nonexistent_module_xyz\n", "bad.py")(f) + ":make"),
             match=("bad.py", "nonexistent_module_xyz")),
        Case("cli", "estimate a missing .py file", estimate_cli(model="{folder}/none.py:make"),
             match=("none.py", "does not exist")),
        Case("cli", "estimate a folder named .py", lambda f: (f / "dir.py").mkdir() or cli("estimate", f"{f}/dir.py:make"),
             match=("dir.py", "folder")),
        Case("cli", "estimate --example-inputs returning text",
             estimate_cli("--example-inputs", "{net}:text"), match=("text()", "returned str")),
        Case("cli", "estimate --example-inputs with --input-shape",
             estimate_cli("--example-inputs", "{net}:make", "--input-shape", "1,3,8,8"), match=("not both",)),
        Case("cli", "estimate an unknown source", lambda f: cli("estimate", "keras:resnet50"), match=("keras",)),
        Case("cli", "estimate torchvision:nonexistent", lambda f: cli("estimate", "torchvision:resnet9000"),
             match=("resnet9000",)),
        Case("cli", "estimate timm:hf-hub:...", lambda f: cli("estimate", "timm:hf-hub:timm/resnet50.a1_in1k"),
             match=("hf-hub", "download")),
        Case("cli", "estimate a missing .onnx", lambda f: cli("estimate", str(f / "none.onnx")),
             match=("none.onnx", "does not exist")),
        Case("cli", "estimate an ONNX file given 5 channels",
             lambda f: cli("estimate", str(onnx_file(f)), "--input-shape", "1,5,16,16"), match=("5 channels",)),
        Case("cli", "no command", lambda f: cli(), match=("command",)),
        Case("cli", "an unknown option", lambda f: cli("estimate", "x.onnx", "--fast"), match=("--fast",)),
    ]


def cases() -> list[Case]:
    """Every case of the battery."""
    return (_profile_cases() + _estimate_cases() + _onnx_cases() + _store_cases() + _sweep_cases()
            + _campaign_cases() + _adapt_cases() + _board_cases() + _measured_cases() + _nas_cases() + _cli_cases())


def main(argv: list[str] | None = None) -> int:
    """Run every case, print those not handled well (``--all``: every case and its
    answer), then the tally per surface; exit code 1 unless all are handled well."""
    show_all = "--all" in (sys.argv[1:] if argv is None else argv)
    results = []
    for case in cases():
        with tempfile.TemporaryDirectory() as folder:
            verdict, detail = judge(case, Path(folder))
        results.append((case, verdict))
        if verdict != "handled well" or show_all:
            print(f"{verdict:<13} {case.surface:<11} {case.name}: {detail[:300]}")
    surfaces = list(dict.fromkeys(case.surface for case, _ in results))
    print(f"\n{'surface':<12}{'cases':>6}" + "".join(f"{v:>14}" for v in VERDICTS))
    for surface in surfaces + ["all"]:
        verdicts = [v for c, v in results if surface in ("all", c.surface)]
        print(f"{surface:<12}{len(verdicts):>6}" + "".join(f"{verdicts.count(v):>14}" for v in VERDICTS))
    return 0 if all(v == "handled well" for _, v in results) else 1


if __name__ == "__main__":
    sys.exit(main())

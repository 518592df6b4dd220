"""Importing annette_torch and building an Estimator loads no runtime and no heavy
scientific stack: OpenVINO, ONNX Runtime, SciPy, scikit-learn, pandas and Ray are imported by
the code that needs them (measuring, fitting, tables, fleets), not at startup."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("openvino", "onnxruntime", "onnx", "scipy", "sklearn", "pandas", "ray")


def modules_after(code: str) -> set[str]:
    """The top-level packages in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", probe], capture_output=True, text=True,
                            env=env, timeout=300, check=True)
    return set(result.stdout.split())


def test_import_and_estimator_load_no_runtime_scipy_sklearn_or_pandas():
    loaded = modules_after("import annette_torch\nannette_torch.Estimator()")
    assert "annette_torch" in loaded and "torch" in loaded
    assert not loaded & set(HEAVY), f"imported at startup: {sorted(loaded & set(HEAVY))}"


def test_the_command_line_parser_loads_no_runtime():
    loaded = modules_after("from annette_torch.cli import build_parser\nbuild_parser()")
    assert not loaded & {"openvino", "onnxruntime", "scipy", "sklearn", "ray"}, sorted(loaded)


def test_the_nn_meter_adapter_loads_no_runtime_until_an_onnx_model_is_predicted():
    loaded = modules_after("from annette_torch.integrations.nn_meter import load_latency_predictor\n"
                           "load_latency_predictor('openvino-cpu')")
    assert not loaded & set(HEAVY), f"imported: {sorted(loaded & set(HEAVY))}"

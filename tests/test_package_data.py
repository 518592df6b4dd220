"""What the library reads at run time is package data, found through importlib.resources
(an installed wheel has it too; .ci/wheel_smoke.sh runs the CLI from a built wheel)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

import annette_torch
from annette_torch.backends.remote import example_config
from annette_torch.calibration.sweep import SweepError, load_sweep, sweep_names, sweep_path, sweeps_folder

PACKAGE = Path(annette_torch.__file__).resolve().parent
ROOT = PACKAGE.parent


def _glob_regex(glob: str) -> re.Pattern:
    """setuptools' package-data glob: ``*`` within a folder, ``**`` across folders."""
    parts = re.split(r"(\*\*/|\*\*|\*|\?)", glob)
    table = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(table.get(part, re.escape(part)) for part in parts))


def _inside_package(path) -> bool:
    return Path(str(path)).resolve().is_relative_to(PACKAGE)


def test_sweeps_resolve_inside_the_package():
    assert str(sweeps_folder()) == str(resources.files("annette_torch.calibration").joinpath("sweeps"))
    assert {"smoke", "quick", "full", "conv-context", "grouped-conv", "training", "training-large", "training-stem"} <= set(sweep_names())
    assert all(_inside_package(sweep_path(name)) for name in sweep_names())
    assert not (ROOT / "calibration" / "sweeps").exists()       # one copy: the package's
    with pytest.raises(SweepError, match=r"known sweeps: conv-context, full, grouped-conv, quick, smoke, training.*shipped in .*annette_torch"):
        load_sweep("no-such-sweep")


def test_board_examples_are_in_the_package():
    for board in ("zcu102", "ncs2"):
        assert _inside_package(example_config(board)) and Path(example_config(board)).is_file()


def test_sweeps_found_from_a_copy_of_the_package_alone(tmp_path):
    """The package copied without the repository around it, run from another folder."""
    shutil.copytree(PACKAGE, tmp_path / "site" / "annette_torch",
                    ignore=shutil.ignore_patterns("__pycache__", "*.json"))   # the built-in profiles: big, not needed
    (tmp_path / "elsewhere").mkdir()
    code = ("from annette_torch.calibration.sweep import load_sweep, sweep_path; "
            "print(len(load_sweep('smoke')), sweep_path('smoke'))")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "elsewhere", env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    count, sweep = done.stdout.split()
    assert int(count) == len(load_sweep("smoke")) and Path(sweep).is_relative_to(tmp_path / "site")


def test_every_data_file_of_the_package_is_package_data():
    """pyproject's [tool.setuptools.package-data] covers every non-Python file under
    annette_torch/ (a file it misses works in the repository and is absent from a wheel)."""
    tomllib = pytest.importorskip("tomllib")        # Python >= 3.11
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    missing = []
    for path in PACKAGE.rglob("*"):
        if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
            continue
        relative = path.relative_to(ROOT)
        covered = False
        for package, globs in patterns.items():
            folder = ROOT / Path(*package.split("."))
            if path.is_relative_to(folder):
                inner = path.relative_to(folder).as_posix()
                covered |= any(_glob_regex(g).fullmatch(inner) for g in globs)
        if not covered:
            missing.append(str(relative))
    assert not missing, f"not package data in pyproject.toml: {missing}"
    assert {"annette_torch.calibration", "annette_torch.backends", "annette_torch.profiles"} <= set(patterns)

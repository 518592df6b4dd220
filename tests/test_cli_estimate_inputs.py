"""``annette-torch estimate``: inputs of any shape and dtype (token ids), several inputs,
inputs from a file, the JSON output and the footer (GMACs, parameters, fallback share)."""
from __future__ import annotations

import json

import pytest

from annette_torch.cli import main as cli_main

TOKENS = """
import torch.nn as nn

class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, ids):
        return self.head(self.embed(ids))

class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(6, 4)

    def forward(self, x, y):
        return self.a(x) + self.b(y)

def tokens():
    return Tokens()

def two():
    return Two()

def two_inputs():
    import torch
    return {"y": torch.zeros(1, 6), "x": torch.zeros(1, 8)}
"""


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(TOKENS)
    return path


def test_token_ids_by_dtype_and_shape(models, capsys):
    assert cli_main(["estimate", f"{models}:tokens", "--input-dtype", "int64", "--input-shape", "1,128"]) == 0
    out = capsys.readouterr().out
    assert "embed" in out and "total:" in out
    assert cli_main(["estimate", f"{models}:tokens", "--input-shape", "1,128"]) == 2      # float ids
    err = capsys.readouterr().err
    assert "'embed'" in err and "--input-dtype int64" in err and "Traceback" not in err


def test_several_inputs_by_shape_or_from_a_file(models, capsys):
    for shapes in (["--input-shape", "1,8;1,6"], ["--input-shape", "1,8", "--input-shape", "1,6"],
                   ["--example-inputs", f"{models}:two_inputs"]):
        assert cli_main(["estimate", f"{models}:two", *shapes]) == 0, shapes
        assert "total:" in capsys.readouterr().out
    assert cli_main(["estimate", f"{models}:two", "--input-shape", "1,8"]) == 2
    assert "one --input-shape per input" in capsys.readouterr().err
    assert cli_main(["estimate", f"{models}:two", "--input-shape", "1,8", "--example-inputs",
                     f"{models}:two_inputs"]) == 2
    assert "not both" in capsys.readouterr().err


def test_json_holds_totals_kernels_and_warnings(models, capsys):
    assert cli_main(["estimate", f"{models}:tokens", "--input-dtype", "int64", "--input-shape", "2,16",
                     "--profile", "zcu102-dpu", "--json", "--memory"]) == 0
    result = json.loads(capsys.readouterr().out)         # stdout is the JSON only
    assert result["model"] == "models:tokens" and result["profile"] == "zcu102-dpu"
    assert result["total_ms"] == pytest.approx(sum(k["time_ms"] for k in result["kernels"]) + result["overhead_ms"])
    assert result["parameters"] == 1000 * 64 + 64 * 10 + 10
    assert result["gmacs"] == pytest.approx(2 * 16 * 64 * 10 / 1e9)
    assert 0 <= result["fallback_share"] <= 1 and isinstance(result["fallback_kinds"], list)
    assert result["memory"]["params_bytes"] > 0
    assert isinstance(result["warnings"], list)
    embed = next(k for k in result["kernels"] if k["kind"] == "embedding")
    assert embed["output_shape"] == [2, 16, 64] and {"layer_model", "profile_entry", "bytes"} <= set(embed)


def test_table_shows_profile_entry_and_the_footer(capsys):
    assert cli_main(["estimate", "torchvision:resnet18", "--profile", "zcu102-dpu"]) == 0
    out = capsys.readouterr().out
    assert "profile_entry" in out.splitlines()[0]
    footer, confidence = out.splitlines()[-2:]
    assert "1.814 GMACs" in footer and "11.69 M parameters" in footer
    assert "by fallback" in confidence or "inside their calibrated ranges" in confidence


def test_hf_spec_from_the_command_line(capsys):
    pytest.importorskip("transformers")
    assert cli_main(["estimate", "hf:GPT2Config", "--seq-len", "16", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    wte = next(k for k in result["kernels"] if k["kernel"] == "wte")
    assert wte["kind"] == "embedding" and wte["bytes"] < 1e6      # 16 rows of 768, not the 154 MB table
    assert result["parameters"] == 124_439_808


def test_bad_dtype_and_seq_len_name_the_problem(capsys):
    with pytest.raises(SystemExit):
        cli_main(["estimate", "torchvision:resnet18", "--input-dtype", "int65"])
    assert "unknown dtype 'int65'" in capsys.readouterr().err
    assert cli_main(["estimate", "torchvision:resnet18", "--seq-len", "16"]) == 2
    assert "--seq-len applies to models whose inputs are token ids" in capsys.readouterr().err

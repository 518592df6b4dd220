"""Board backends (zcu102, ncs2): configuration errors, command lines (through dry runs),
report parsers on recorded reports in the tools' formats, and whole runs against fake
tools (ssh, scp, the Vitis AI toolchain, an OpenVINO 2022.3 interpreter) placed first on
PATH, which simulate a board that answers, hangs, drops the connection or writes a
malformed report. No network, board or toolchain is needed."""
from __future__ import annotations

import importlib
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

from annette_torch.backends import BackendError, KernelRecord, get_backend
from annette_torch.backends.base import onnx_node_places, onnx_scopes
from annette_torch.backends.ncs2 import (parse_benchmark_report, parse_detailed_counters,
                                         to_module_paths)
from annette_torch.backends.ncs2 import parse_runner_report as parse_ncs2_report
from annette_torch.backends.remote import (BoardConfigError, Command, CommandFailed, ReportError, example_config,
                                          run_command)
from annette_torch.backends.zcu102 import (_shown_as, dpu_kernels, export_portable, layer_of_op,
                                           parse_runner_report, parse_vaitrace_summary, parse_xdputil_query,
                                           xmodel_formal_name, xmodel_scopes)
from annette_torch.calibration import BenchmarkSpec, build_benchmark, load_measurements, match_kernels, run_campaign
from annette_torch.graph import trace

FIXTURES = Path(__file__).parent / "fixtures" / "boards"
CONV_BN_RELU = BenchmarkSpec("conv_chain", {"h": 8, "w": 8, "c": 4, "f": 8, "k": 3, "op": "bn-relu"})


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def conv_chain() -> tuple[nn.Module, tuple[int, ...], list[str], object]:
    model, shape = build_benchmark(CONV_BN_RELU)
    graph = trace(model, input_shape=shape)
    return model, shape, [layer.module_path for layer in graph.layers], graph


# --- fake tools ------------------------------------------------------------------------------

FAKE_SSH = r'''
import os, subprocess, sys, time
args = sys.argv[1:]
i = 0
while args[i] != "--":
    i += 2                                   # -p PORT, -o OPTION, -i KEY
command = args[i + 2]                        # -- user@host COMMAND
board = os.environ["FAKE_BOARD"]
with open(os.path.join(board, "ssh.log"), "a") as log:
    log.write(command + "\n")
plan_path = os.path.join(board, "plan")
action = "ok"
if os.path.exists(plan_path):
    plan = open(plan_path).read().split()
    if plan:
        action = plan.pop(0)
        open(plan_path, "w").write(" ".join(plan))
if action == "refuse":
    print("ssh: connect to host board port 22: Connection refused", file=sys.stderr)
    sys.exit(255)
if action == "hang":
    time.sleep(30)
sys.exit(subprocess.call(["bash", "-c", command]))
'''

FAKE_SCP = r'''
import os, shutil, sys
args = sys.argv[1:]
i = 0
while args[i] != "--":
    i += 2                                   # -P PORT, -o OPTION, -i KEY
*sources, target = args[i + 1:]
local = lambda p: p.split(":", 1)[1] if "@" in p.split(":", 1)[0] and ":" in p else p
for source in sources:
    shutil.copy(local(source), local(target))
'''

FAKE_XDPUTIL = r'''
import os, sys
assert sys.argv[1:] == ["query"], sys.argv
sys.stdout.write(open(os.environ["FAKE_XDPUTIL_QUERY"]).read())
'''

FAKE_BOARD_PYTHON = r'''
import os, shutil, sys
script, xmodel = sys.argv[1], sys.argv[2]
assert os.path.isfile(script) and os.path.isfile(xmodel), "runner or xmodel not uploaded"
out = sys.argv[sys.argv.index("--out") + 1]
shutil.copy(os.environ["FAKE_RUNNER_RESULT"], out)
'''

FAKE_VAITRACE = r'''
import os, shutil, sys
shutil.copy(os.environ["FAKE_VAITRACE_SUMMARY"], sys.argv[sys.argv.index("-o") + 1])
'''

FAKE_VAI_PYTHON = r'''
import os, sys
script, work = sys.argv[1], sys.argv[2]
for name in ("model.pt", "annette_model.py", "quantize.json", "zcu102_quantize.py"):
    assert os.path.isfile(os.path.join(work, name)), name + " missing"
os.makedirs(os.path.join(work, "quantized"), exist_ok=True)
open(os.path.join(work, "quantized", "quantized.xmodel"), "w").write("quantized")
'''

FAKE_VAI_C_XIR = r'''
import os, sys
a = sys.argv
assert open(a[a.index("-x") + 1]).read() == "quantized"
out = a[a.index("-o") + 1]
os.makedirs(out, exist_ok=True)
open(os.path.join(out, a[a.index("-n") + 1] + ".xmodel"), "w").write("compiled")
'''

FAKE_OV_PYTHON = r'''
import json, os, shutil, sys
if "--info" in sys.argv:
    devices = os.environ.get("FAKE_OV_DEVICES", "CPU,MYRIAD").split(",")
    print(json.dumps({"openvino": "2022.3.1-9227-cf2c7da5689-releases/2022/3", "devices": devices,
                      "device_name": "Intel Movidius Myriad X VPU" if "MYRIAD" in devices else ""}))
    sys.exit(0)
failures = os.environ.get("FAKE_OV_FAILURES")
if failures and int(open(failures).read() or 0) > 0:
    left = int(open(failures).read()) - 1
    open(failures, "w").write(str(left))
    print("inference on MYRIAD failed: [ GENERAL_ERROR ] XLink device lost", file=sys.stderr)
    sys.exit(4)
assert os.path.isfile(sys.argv[2]), "model.onnx missing"
shutil.copy(os.environ["FAKE_NCS2_RESULT"], sys.argv[sys.argv.index("--out") + 1])
'''


@pytest.fixture
def fakes(tmp_path, monkeypatch) -> Path:
    """A folder of fake tools first on PATH, and a fake board folder (``FAKE_BOARD``)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, body in {"ssh": FAKE_SSH, "scp": FAKE_SCP, "xdputil": FAKE_XDPUTIL, "board_python": FAKE_BOARD_PYTHON,
                       "vaitrace": FAKE_VAITRACE, "vai_python": FAKE_VAI_PYTHON, "vai_c_xir": FAKE_VAI_C_XIR,
                       "ov_python": FAKE_OV_PYTHON}.items():
        path = tools / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    board = tmp_path / "board"
    board.mkdir()
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_BOARD", str(board))
    monkeypatch.setenv("FAKE_XDPUTIL_QUERY", str(FIXTURES / "xdputil_query.txt"))
    monkeypatch.setenv("FAKE_RUNNER_RESULT", str(FIXTURES / "zcu102_result_conv_chain.json"))
    monkeypatch.setenv("FAKE_VAITRACE_SUMMARY", str(FIXTURES / "vaitrace_summary_conv_chain.txt"))
    monkeypatch.setenv("FAKE_NCS2_RESULT", str(FIXTURES / "ncs2_result_conv_chain.json"))
    return tools


def zcu102_config(tmp_path: Path, tools: Path | None = None, mode: str = "local", extra_board: str = "",
                  extra_vai: str = "") -> Path:
    """A zcu102 configuration for the fake tools (``tools``) or, without them, for dry runs."""
    key = tmp_path / "id_board"
    key.write_text("fake key")
    bin_ = (lambda name: str(tools / name)) if tools else (lambda name: name)
    text = f'''
[vitis_ai]
mode = "{mode}"
image = "xilinx/vitis-ai-pytorch-cpu:3.0.0.106"
conda_env = "vitis-ai-pytorch"
python = "{bin_("vai_python") if tools else "python"}"
vai_c_xir = "{bin_("vai_c_xir")}"
arch = "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json"
work_dir = "{tmp_path / "work"}"
{extra_vai}
[board]
host = "zcu102.local"
user = "root"
key = "{key}"
work_dir = "{tmp_path / "board" / "annette"}"
python = "{bin_("board_python") if tools else "python3"}"
retry_wait_s = 0
{extra_board}
'''
    path = tmp_path / "zcu102.toml"
    path.write_text(text)
    return path


def ncs2_config(tmp_path: Path, tools: Path | None = None, extra: str = "") -> Path:
    python = str(tools / "ov_python") if tools else "/opt/ov2022/bin/python"
    path = tmp_path / "ncs2.json"
    path.write_text(json.dumps({"openvino": {"python": python, "work_dir": str(tmp_path / "work"),
                                             "retry_wait_s": 0, **json.loads("{" + extra + "}")}}))
    return path


# --- configuration -----------------------------------------------------------------------------

def test_missing_config_names_the_option_and_the_installed_example():
    with pytest.raises(BoardConfigError, match=r"--config FILE.*annette_torch/backends/boards/zcu102.example.toml") as info:
        get_backend("zcu102")
    assert Path(str(info.value).rsplit(" ", 1)[-1]).is_file()      # the path it names is there (package data)
    with pytest.raises(BoardConfigError, match="does not exist"):
        get_backend("ncs2", config="/no/such/ncs2.toml")


@pytest.mark.parametrize("backend, remove, message", [
    ("zcu102", 'host = "zcu102.local"', r"missing key 'host' in section \[board\] \(the board's hostname"),
    ("zcu102", 'arch = "/opt', r"missing key 'arch' in section \[vitis_ai\]"),
    ("zcu102", 'mode = "local"', r"missing key 'mode' in section \[vitis_ai\]"),
])
def test_missing_keys_are_named_with_their_meaning(tmp_path, backend, remove, message):
    path = zcu102_config(tmp_path)
    path.write_text("\n".join(line for line in path.read_text().splitlines() if not line.startswith(remove)))
    with pytest.raises(BoardConfigError, match=message):
        get_backend(backend, config=path)


def test_wrong_values_are_named(tmp_path):
    with pytest.raises(BoardConfigError, match=r"\[board\] profiler must be one of runner, vaitrace"):
        get_backend("zcu102", config=zcu102_config(tmp_path, extra_board='profiler = "perf"'))
    with pytest.raises(BoardConfigError, match=r"fine_grained needs profiler = \"vaitrace\""):
        get_backend("zcu102", config=zcu102_config(tmp_path, extra_board="fine_grained = true"))
    with pytest.raises(BoardConfigError, match=r"\[openvino\] timeout_s must be of type int or float"):
        get_backend("ncs2", config=ncs2_config(tmp_path, extra='"timeout_s": "soon"'))
    with pytest.raises(BoardConfigError, match=r"missing key 'python' in section \[openvino\] \(a Python interpreter"):
        (tmp_path / "empty.toml").write_text("[openvino]\n")
        get_backend("ncs2", config=tmp_path / "empty.toml")
    key_missing = zcu102_config(tmp_path)
    key_missing.write_text(key_missing.read_text().replace(str(tmp_path / "id_board"), "/no/key"))
    with pytest.raises(BoardConfigError, match=r"\[board\] key: no such file"):
        get_backend("zcu102", config=key_missing)
    with pytest.raises(ValueError, match="supports precisions int8"):
        get_backend("zcu102", precision="f32", config=zcu102_config(tmp_path))
    with pytest.raises(ValueError, match="use --threads 1"):
        get_backend("ncs2", threads=4, config=ncs2_config(tmp_path))


def test_documented_examples_load_with_every_key(tmp_path):
    example = Path(example_config("zcu102")).read_text()
    key = tmp_path / "key"
    key.write_text("k")
    (tmp_path / "zcu102.toml").write_text(example.replace("~/.ssh/id_zcu102", str(key)))
    zcu = get_backend("zcu102", config=tmp_path / "zcu102.toml")
    assert (zcu.mode, zcu.ssh.host, zcu.profiler, zcu.retries) == ("docker", "192.168.1.102", "runner", 2)
    ncs = get_backend("ncs2", config=example_config("ncs2"))
    assert (ncs.python, ncs.device, ncs.profiler, ncs.env) == ("/opt/ov2022/bin/python", "MYRIAD", "runner", {})


# --- command lines, through dry runs ------------------------------------------------------------

def test_zcu102_dry_run_lists_every_host_and_board_command(tmp_path):
    model, shape, paths, _ = conv_chain()
    lines = get_backend("zcu102", config=zcu102_config(tmp_path, mode="docker")).dry_run(model, shape, paths, 2, 7)
    assert lines[0].startswith("# work folder:")
    quantize, compile_, prepare, upload, run, download = lines[1:]
    assert quantize.startswith("docker run --rm -v ") and "xilinx/vitis-ai-pytorch-cpu:3.0.0.106 bash -c" in quantize
    assert "conda activate" not in quantize       # no `activate` in this config
    assert "timeout -k 10 900 python " in quantize and "zcu102_quantize.py" in quantize and "chown -R" in quantize
    assert "vai_c_xir -x " in compile_ and "/quantized/quantized.xmodel -a /opt/vitis_ai/compiler/arch/DPUCZDX8G/" \
        "ZCU102/arch.json -o " in compile_ and "/compiled -n annette" in compile_
    for line in (prepare, run):
        assert line.startswith("ssh -p 22 -o BatchMode=yes -o ConnectTimeout=10 ")
        assert f"-i {tmp_path / 'id_board'} -- root@zcu102.local " in line
    assert prepare.endswith(f"'rm -rf {tmp_path}/board/annette/run && mkdir -p {tmp_path}/board/annette/run'")
    assert upload.startswith("scp -P 22 -o BatchMode=yes") and upload.endswith(
        f"zcu102_runner.py {lines[0].split()[3]}/compiled/annette.xmodel root@zcu102.local:{tmp_path}/board/annette/run/")
    assert "timeout -k 10 300 python3 zcu102_runner.py annette.xmodel --warmup 2 --repeats 7 --out result.json" in run
    assert download.startswith("scp ") and download.split()[-2] == \
        f"root@zcu102.local:{tmp_path}/board/annette/run/result.json"


def test_zcu102_dry_run_in_conda_with_vaitrace(tmp_path):
    model, shape, paths, _ = conv_chain()
    config = zcu102_config(tmp_path, mode="conda", extra_board='profiler = "vaitrace"\nfine_grained = true',
                           extra_vai="compiler_options = '{\"output_ops\": \"x\"}'")
    lines = get_backend("zcu102", config=config).dry_run(model, shape, paths, 1, 3)
    assert lines[1].startswith("conda run --no-capture-output -n vitis-ai-pytorch python ")
    assert lines[2].endswith("""-n annette --options '{"output_ops": "x"}'""")
    trace_line = next(line for line in lines if "vaitrace" in line)
    assert "vaitrace -t 300 --txt_summary -o " in trace_line and "/vaitrace.txt --fine_grained -p " in trace_line
    assert trace_line.rstrip("'").endswith("zcu102_runner.py annette.xmodel --warmup 1 --repeats 3 --out traced.json")
    assert lines[-1].split()[-3:-1] == [f"root@zcu102.local:{tmp_path}/board/annette/run/result.json",
                                        f"root@zcu102.local:{tmp_path}/board/annette/run/vaitrace.txt"]


def test_ncs2_dry_run_runner_and_benchmark_app(tmp_path):
    model, shape, paths, _ = conv_chain()
    lines = get_backend("ncs2", config=ncs2_config(tmp_path)).dry_run(model, shape, paths, 2, 9)
    assert lines[1].startswith("/opt/ov2022/bin/python ") and "ncs2_runner.py " in lines[1]
    assert lines[1].endswith("/model.onnx --device MYRIAD --warmup 2 --repeats 9 --out " +
                             lines[1].split()[-1]) and lines[1].endswith("/result.json")
    app = get_backend("ncs2", config=ncs2_config(tmp_path, extra='"profiler": "benchmark_app", '
                                                                 '"env": {"LD_LIBRARY_PATH": "/opt/ov/lib"}'))
    line = app.dry_run(model, shape, paths, 2, 9)[1]
    assert line.startswith("LD_LIBRARY_PATH=/opt/ov/lib benchmark_app -m ")
    assert "-d MYRIAD -hint latency -api sync -nireq 1 -niter 9 -pc -report_type detailed_counters -report_folder " in line


def test_cli_dry_run_prints_commands_per_benchmark(tmp_path, capsys):
    from annette_torch.cli import main

    sweep = tmp_path / "two.csv"
    sweep.write_text("family,count,n,h,w,c,f,k,stride,groups,op,pool\nconv2d,1,,8,8,4,8,3,,,,\n"
                     "activation,1,,8,8,4,,,,,relu,\n")
    code = main(["calibrate", "--backend", "ncs2", "--precision", "f16", "--config", str(ncs2_config(tmp_path)),
                 "--sweep", str(sweep), "--dry-run", "--warmup", "1", "--repeats", "2"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and [line[:9] for line in out if line.startswith("# conv2d") or line.startswith("# activ")] \
        == ["# conv2d-", "# activat"]
    assert sum("ncs2_runner.py" in line and "--repeats 2" in line for line in out) == 2


# --- parsers on recorded reports ----------------------------------------------------------------

def test_xdputil_query_gives_the_dpu_and_runtime():
    info = parse_xdputil_query(fixture("xdputil_query.txt"))
    assert info == {"arch": "DPUCZDX8G_ISA1_B4096", "cores": 3, "frequency_mhz": 300, "vai_version": "3.0.0"}
    with pytest.raises(ReportError, match="did not print JSON"):
        parse_xdputil_query("bash: xdputil: command not found")


def test_vaitrace_summary_table():
    rows = parse_vaitrace_summary(fixture("vaitrace_summary_conv_chain.txt"))
    assert [(r.dpu, r.batch, r.subgraph, r.workload_gop, r.time_ms) for r in rows] == [
        ("DPUCZDX8G_1", 1, "Sequential__Sequential_Conv2d_conv__input_2", 0.019, 0.061),
        ("DPUCZDX8G_2", 1, "Sequential__Sequential_Conv2d_conv__input_2", 0.019, 0.060)]
    with pytest.raises(ReportError, match="not closed by a '=' rule"):
        parse_vaitrace_summary(fixture("vaitrace_summary_truncated.txt"))
    with pytest.raises(ReportError, match="no 'DPU Summary' table"):
        parse_vaitrace_summary("vaitrace: no DPU activity recorded\n")
    assert _shown_as("subgraph_" + "A" * 70, "..." + "A" * 60) and not _shown_as("subgraph_B", "C")


def test_xmodel_names_map_to_module_paths():
    assert xmodel_formal_name("Net::Net/Conv2d[conv]/input.2") == "Net__Net_Conv2d_conv__input_2"
    model = nn.Sequential()
    model.add_module("block", nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU()))
    model.add_module("conv", nn.Conv2d(3, 3, 1))
    scopes = xmodel_scopes(model, ["block.0", "block.1", "conv", "", "missing"])
    assert dict(scopes) == {"Sequential_block__Conv2d_0__": "block.0", "Sequential_block__ReLU_1__": "block.1",
                            "Conv2d_conv__": "conv"}
    assert layer_of_op("Sequential__Sequential_Sequential_block__Conv2d_0__input_3", scopes) == "block.0"
    assert layer_of_op("Sequential__Sequential_Conv2d_conv__ret_fix", scopes) == "conv"
    assert layer_of_op("Sequential__input_0_fix", scopes) == ""
    assert layer_of_op("Sequential__Sequential_XConv2d_conv__5", scopes) == ""     # not at a name boundary


def test_zcu102_report_to_matched_layers():
    model, _, paths, graph = conv_chain()
    report = parse_runner_report(fixture("zcu102_result_conv_chain.json"))
    kernels = dpu_kernels(report, xmodel_scopes(model, paths), "DPUCZDX8G_ISA1_B4096")
    assert kernels == [KernelRecord("subgraph_Sequential__Sequential_Conv2d_conv__input_2", "DPU",
                                    "DPUCZDX8G_ISA1_B4096", "EXECUTED", (0.1415, 0.1402, 0.1433, 0.1398, 0.1421),
                                    ("conv", "act"))]
    rows = {row["layer"]: row for row in match_kernels(graph, kernels)}
    assert {name: row["status"] for name, row in rows.items()} == {"conv": "executed", "bn": "fused", "act": "fused"}
    assert rows["conv"]["time_ms"] == pytest.approx(0.1415) and rows["conv"]["fusion"] == "fused"
    traced = dpu_kernels(report, xmodel_scopes(model, paths), "DPUCZDX8G_ISA1_B4096",
                         parse_vaitrace_summary(fixture("vaitrace_summary_conv_chain.txt")))
    assert (traced[0].runs_ms, traced[0].exec_type) == ((0.061, 0.060), "DPUCZDX8G_1;DPUCZDX8G_2")


def test_zcu102_layers_on_the_cpu_and_malformed_reports_are_errors():
    model, shape = build_benchmark(BenchmarkSpec("conv_chain", {"h": 8, "c": 4, "f": 8, "k": 3, "op": "sigmoid"}))
    paths = [layer.module_path for layer in trace(model, input_shape=shape).layers]
    report = parse_runner_report(fixture("zcu102_result_cpu_subgraph.json"))
    with pytest.raises(ValueError, match=r"the DPU cannot run layer\(s\) act: the compiler put them on the CPU "
                                         r"\(subgraph subgraph_Sequential__Sequential_Sigmoid_act__9, op types sigmoid\)"):
        dpu_kernels(report, xmodel_scopes(model, paths), "DPUCZDX8G_ISA1_B4096")
    with pytest.raises(ReportError, match=r"subgraphs\[0\].runs_ms must be a list of non-negative numbers"):
        parse_runner_report(fixture("zcu102_result_malformed.json"))
    with pytest.raises(ReportError, match="is not JSON"):
        parse_runner_report('{"format": "annette-zcu102-runner", "subgr')


def test_ncs2_runner_report_to_matched_layers(tmp_path):
    model, shape, paths, graph = conv_chain()
    from annette_torch.backends import export_onnx
    export_onnx(model, shape, tmp_path / "model.onnx")
    kernels, end_to_end = parse_ncs2_report(fixture("ncs2_result_conv_chain.json"))
    assert end_to_end == [1.212, 1.198, 1.240, 1.205]
    exported = onnx.load(str(tmp_path / "model.onnx")).graph
    kernels = to_module_paths(kernels, onnx_node_places(exported, onnx_scopes(exported)), paths)
    assert [(k.name, k.status, k.layers) for k in kernels] == [
        ("Receive-Tensor", "EXECUTED", ()), ("input@FP16", "EXECUTED", ()),
        ("/conv/Conv", "EXECUTED", ("conv", "act")), ("/act/Relu", "OPTIMIZED_OUT", ("act",)),
        ("/act/Relu_output_0@FP32", "EXECUTED", ())]
    assert kernels[2].nodes == (("conv", "Conv", 0, 1), ("act", "Relu", 0, 1))     # what the matcher ties by
    rows = match_kernels(graph, kernels)
    assert [(r["layer"], r["status"]) for r in rows] == [("conv", "executed"), ("bn", "fused"), ("act", "fused"),
                                                         ("", "executed"), ("", "executed"), ("", "executed")]
    with pytest.raises(ReportError, match=r"layers\[0\]: unknown status 'RUNNING'"):
        parse_ncs2_report(fixture("ncs2_result_malformed.json"))


def test_benchmark_app_reports():
    kernels = parse_detailed_counters(fixture("benchmark_detailed_counters_report.csv"))
    assert [(k.name, k.status, k.kernel_type, k.exec_type, k.runs_ms) for k in kernels] == [
        ("Receive-Tensor", "EXECUTED", "Receive-Tensor", "Receive-Tensor", (0.051,)),
        ("input@FP16", "EXECUTED", "Convert", "Convert", (0.07,)),
        ("/conv/Conv", "EXECUTED", "Convolution", "MyriadXHwOp", (0.43,)),
        ("/act/Relu", "OPTIMIZED_OUT", "Relu", "", (0.0,)),
        ("/act/Relu_output_0@FP32", "EXECUTED", "Convert", "Convert", (0.082,))]
    assert parse_benchmark_report(fixture("benchmark_report.csv")) == 1.21
    with pytest.raises(ReportError, match="the last block has no 'Total' row"):
        parse_detailed_counters(fixture("benchmark_detailed_counters_truncated.csv"))
    with pytest.raises(ReportError, match="no 'latency \\(ms\\)' row"):
        parse_benchmark_report("Execution results\nthroughput;10\n")


def test_export_portable_loads_without_annette_torch(tmp_path, monkeypatch):
    model, shape = build_benchmark(BenchmarkSpec("residual", {"h": 6, "c": 4, "k": 3}))
    assert export_portable(model, tmp_path) == ["_Residual", "Eltwise"]
    assert type(model).__module__ == "annette_torch.calibration.generator"      # the class is left alone
    monkeypatch.syspath_prepend(str(tmp_path))
    portable = importlib.import_module("annette_model")
    try:
        loaded = torch.load(tmp_path / "model.pt", weights_only=False)
        assert type(loaded) is portable._Residual and type(loaded.add) is portable.Eltwise
        x = torch.randn(shape)
        with torch.no_grad():
            assert torch.equal(loaded(x), model(x))
    finally:
        sys.modules.pop("annette_model", None)


# --- whole runs against fake tools -------------------------------------------------------------

def test_zcu102_profile_end_to_end_with_a_fake_board(tmp_path, fakes):
    model, shape, paths, graph = conv_chain()
    backend = get_backend("zcu102", config=zcu102_config(tmp_path, fakes))
    assert backend.fingerprint() == {"backend": "zcu102", "runtime_version": "vai3.0.0",
                                     "cpu": "DPUCZDX8G_ISA1_B4096 x3 @ 300 MHz", "threads": 1, "precision": "int8"}
    profiled = backend.profile(model, shape, paths, warmup=2, repeats=5)
    assert [k.layers for k in profiled.kernels] == [("conv", "act")]
    assert profiled.latency.median_ms == pytest.approx(0.1602)
    log = (tmp_path / "board" / "ssh.log").read_text().splitlines()
    assert log[0] == "xdputil query" and log[1].startswith("rm -rf ") and "zcu102_runner.py annette.xmodel" in log[2]
    assert list((tmp_path / "work").iterdir()) == []                     # work folders are removed


def test_zcu102_with_vaitrace_uses_the_hardware_counter(tmp_path, fakes):
    model, shape, paths, _ = conv_chain()
    backend = get_backend("zcu102", config=zcu102_config(tmp_path, fakes, extra_board='profiler = "vaitrace"\n'
                                                         f'vaitrace = "{fakes / "vaitrace"}"'))
    kernel, = backend.profile(model, shape, paths, warmup=2, repeats=5).kernels
    assert kernel.runs_ms == (0.061, 0.060) and kernel.layers == ("conv", "act")


def test_a_hanging_board_is_retried(tmp_path, fakes, capsys):
    model, shape, paths, _ = conv_chain()
    (tmp_path / "board" / "plan").write_text("ok hang")           # xdputil answers, then the board hangs once
    backend = get_backend("zcu102", config=zcu102_config(tmp_path, fakes, extra_board="copy_timeout_s = 0.5"))
    assert backend.profile(model, shape, paths, warmup=2, repeats=5).kernels[0].layers == ("conv", "act")
    assert "attempt 2 of 3" in capsys.readouterr().out


def test_a_board_that_stays_down_fails_the_step_after_the_retries(tmp_path, fakes):
    model, shape, paths, _ = conv_chain()
    (tmp_path / "board" / "plan").write_text("ok " + "refuse " * 3)
    backend = get_backend("zcu102", config=zcu102_config(tmp_path, fakes))
    with pytest.raises(BackendError, match=r"failed to run on the board: .*exit code 255.*Connection refused"
                                           r".*\(after 3 attempts\)"):
        backend.profile(model, shape, paths, warmup=2, repeats=5)
    (tmp_path / "board" / "plan").write_text("refuse " * 3)
    unreachable = get_backend("zcu102", config=zcu102_config(tmp_path, fakes, extra_board="retries = 0"))
    with pytest.raises(BackendError, match=r"failed to reach the board: .*check \[board\] host, user, port and key"):
        unreachable.fingerprint()


def test_missing_toolchain_and_interpreter_name_their_keys(tmp_path, fakes, monkeypatch):
    model, shape, paths, _ = conv_chain()
    config = zcu102_config(tmp_path, fakes)
    config.write_text(config.read_text().replace(str(fakes / "vai_c_xir"), "/opt/none/vai_c_xir"))
    with pytest.raises(BackendError, match=r"failed to compile: .*'/opt/none/vai_c_xir' not found; set its path "
                                           r"with \[vitis_ai\] vai_c_xir"):
        get_backend("zcu102", config=config).profile(model, shape, paths, 2, 5)
    missing = ncs2_config(tmp_path)
    with pytest.raises(BackendError, match=r"failed to reach the device: .*'/opt/ov2022/bin/python' not found; "
                                           r"set its path with \[openvino\] python"):
        get_backend("ncs2", config=missing).fingerprint()
    monkeypatch.setenv("FAKE_OV_DEVICES", "CPU")
    with pytest.raises(BackendError, match="sees no MYRIAD device .*sees CPU.*plug in the NCS2"):
        get_backend("ncs2", config=ncs2_config(tmp_path, fakes)).fingerprint()


def test_ncs2_profile_retries_a_lost_stick(tmp_path, fakes, monkeypatch, capsys):
    model, shape, paths, _ = conv_chain()
    failures = tmp_path / "failures"
    failures.write_text("1")
    monkeypatch.setenv("FAKE_OV_FAILURES", str(failures))
    backend = get_backend("ncs2", config=ncs2_config(tmp_path, fakes))
    assert backend.fingerprint()["cpu"] == "Intel Movidius Myriad X VPU"
    profiled = backend.profile(model, shape, paths, warmup=2, repeats=4)
    assert [k.layers for k in profiled.kernels if k.status == "EXECUTED"] == [(), (), ("conv", "act"), ()]
    assert profiled.latency.median_ms == pytest.approx(1.2085)
    assert "XLink device lost" in capsys.readouterr().out


def test_run_command_kills_on_timeout():
    with pytest.raises(CommandFailed, match="no answer within 0.2 s") as info:
        run_command(Command((sys.executable, "-c", "import time; time.sleep(5)"), 0.2, "sleep"))
    assert info.value.transient


def test_malformed_report_fails_the_benchmark_and_stores_no_layer_rows(tmp_path, fakes, monkeypatch):
    monkeypatch.setenv("FAKE_NCS2_RESULT", str(FIXTURES / "ncs2_result_malformed.json"))
    spec = BenchmarkSpec("conv2d", {"h": 8, "c": 4, "f": 8, "k": 3})
    summary = run_campaign("ncs2", [spec], tmp_path / "store", precision="f16", warmup=1, repeats=2,
                           progress=False, backend_options={"config": str(ncs2_config(tmp_path, fakes))})
    assert (summary.measured, summary.failed, summary.layer_rows) == (0, 1, 0)
    fingerprint, networks, layers = load_measurements(summary.store)
    assert fingerprint["backend"] == "ncs2" and fingerprint["runtime_version"].startswith("2022.3")
    assert networks["status"].tolist() == ["failed"] and len(layers) == 0
    assert "failed to parse the report" in networks["error"].iloc[0] and "unknown status 'RUNNING'" in \
        networks["error"].iloc[0]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client on this machine")
def test_the_real_ssh_client_takes_the_options_and_reports_a_refused_board(tmp_path):
    config = zcu102_config(tmp_path, extra_board="retries = 0\nport = 1\nconnect_timeout_s = 3")
    config.write_text(config.read_text().replace('host = "zcu102.local"', 'host = "127.0.0.1"'))
    (tmp_path / "id_board").chmod(0o600)
    with pytest.raises(BackendError, match=r"failed to reach the board: .*exit code 255: .*127.0.0.1 port 1: "
                                           r"Connection refused.*check \[board\] host, user, port and key"):
        get_backend("zcu102", config=config).fingerprint()

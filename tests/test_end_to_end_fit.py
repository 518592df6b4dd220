"""``calibrate --for --method end-to-end``: kernel times fitted to whole networks' times."""
import json

import numpy as np
import pytest

from annette_torch import Estimator
from annette_torch.backends.base import export_onnx
from annette_torch.calibration.end_to_end import NETWORKS_FILE, RecordedNetwork, fit_kernel_times, read_networks
from annette_torch.calibration.in_context import calibrate_for
from annette_torch.cli import main as cli_main
from annette_torch.measure import Protocol
from annette_torch.measure.kernel_table import (KERNELS_FILE, SCALE_FILE, KernelTableError, MeasuredKernels,
                                                kernel_signatures, read_scale, write_scale)

from test_in_context import SHAPE, _graph, _rows, models  # noqa: F401 -- the fixture and its helpers

pytestmark = pytest.mark.filterwarnings("ignore::annette_torch.measure.BusyMachineWarning",
                                        "ignore::annette_torch.profiles.fingerprint.ProfileMismatchWarning")
OVERHEAD_MS = 0.01


def _networks(rng, counts, times_ms, prior_ms):
    signatures = [f"conv||{j},1" for j in range(len(prior_ms))]
    return [RecordedNetwork(f"net{i}", OVERHEAD_MS + float(row @ times_ms),
                            {s: (int(c), float(p)) for s, c, p in zip(signatures, row, prior_ms) if c})
            for i, row in enumerate(counts)]


def test_the_fit_predicts_unseen_combinations_of_its_kernels_better_than_one_scale():
    rng = np.random.default_rng(0)
    prior = rng.uniform(0.05, 1.0, 12)
    truth = prior * 1.4 * rng.uniform(0.7, 1.3, 12)          # the machine: slower, and not uniformly
    counts = rng.integers(0, 4, (40, 12)) * (rng.random((40, 12)) < 0.6)
    counts[counts.sum(1) == 0, 0] = 1
    networks = _networks(rng, counts, truth, prior)
    seen, unseen = networks[:15], networks[15:]
    fit = fit_kernel_times(seen, OVERHEAD_MS)
    assert fit.scale == pytest.approx(1.4, rel=0.15)

    def error(times):
        return np.mean([abs(OVERHEAD_MS + sum(c * times[s] for s, (c, _) in net.kernels.items())
                            - net.measured_ms) / net.measured_ms for net in unseen])
    scaled = error({s: fit.scale * p for net in networks for s, (_, p) in net.kernels.items()})
    assert error(fit.times_ms) < 0.6 * scaled
    assert max(abs(f / m - 1) for _, m, _, f in fit.networks) < 0.03      # the networks it was fitted to
    assert "fitted 12 kernel times to the end-to-end times of 15 network(s)" in str(fit)


def test_one_network_is_reproduced_and_its_kernels_keep_their_proportions():
    net = RecordedNetwork("one", 3.0, {"conv||1": (2, 0.5), "add||2": (1, 0.25)})
    fit = fit_kernel_times([net], OVERHEAD_MS)
    assert OVERHEAD_MS + 2 * fit.times_ms["conv||1"] + fit.times_ms["add||2"] == pytest.approx(3.0, rel=0.01)
    assert fit.times_ms["conv||1"] / fit.times_ms["add||2"] == pytest.approx(2.0, rel=0.05)
    with pytest.raises(ValueError, match="at least one measured network"):
        fit_kernel_times([], OVERHEAD_MS)


def test_recorded_networks_are_validated_and_the_last_row_of_a_name_wins(tmp_path):
    path = tmp_path / NETWORKS_FILE
    header = "network,measured_ms,kernels,measured_utc\n"
    kernels = json.dumps({"conv||1": [2, 0.5]}).replace('"', '""')
    path.write_text(header + f'a,1.5,"{kernels}",t\na,2.5,"{kernels}",t\nb,1.0,"{kernels}",t\nc,1')   # c: cut by a kill
    recorded = read_networks(path)
    assert [(n.name, n.measured_ms) for n in recorded] == [("a", 2.5), ("b", 1.0)]
    assert recorded[0].kernels == {"conv||1": (2, 0.5)}
    for bad in (f'a,-1,"{kernels}",t\n', 'a,1,"{not json",t\n', 'a,1,"{""conv||1"": [0, 0.5]}",t\n'):
        path.write_text(header + bad)
        with pytest.raises(KernelTableError, match=f"{NETWORKS_FILE} line 2"):
            read_networks(path)


def test_end_to_end_times_networks_fits_their_kernels_and_refits_with_later_networks(models, tmp_path, capsys):
    out = tmp_path / "measured"
    quick = ["--rounds", "2", "--warmup", "1", "--repeats", "2", "--input-shape", "1,3,16,16", "--compile", "once",
             "--drift", "none"]
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--for", f"{models}:two_blocks", "--method", "end-to-end",
                     "--out", str(out), *quick]) == 0
    printed = capsys.readouterr().out
    assert "to the end-to-end times of 1 network(s)" in printed and "with the fitted table" in printed
    folder = next(out.iterdir())
    estimator = Estimator("torch-cpu")
    graphs = {name: _graph(models, name) for name in ("two_blocks", "one_block")}
    first = set(_rows(folder)["signature"])
    table = estimator.kernel_table(graphs["two_blocks"])
    assert first == {s for s, free in zip(kernel_signatures(table), table.free) if not free}
    assert set(_rows(folder)["tie"]) == {"fitted"}

    summary = calibrate_for([f"{models}:one_block"], "torch-cpu", out, method="end-to-end", input_shape=SHAPE,
                            protocol=Protocol(rounds=2, warmup=1, repeats=2, compile_once=True, across_rounds="median"),
                            progress=False)
    assert [n.name for n in read_networks(folder / NETWORKS_FILE)] == ["models:two_blocks", "models:one_block"]
    assert len(summary.fit.networks) == 2                  # refitted over both networks
    with_table = Estimator("torch-cpu", measured=MeasuredKernels.load(folder))
    for graph in graphs.values():
        report = with_table.report(graph)
        assert (report[report["bound"] != "free"]["layer_model"] == "measured").all()
    (result,) = summary.results
    assert result.table_ms == pytest.approx(with_table(graphs["one_block"]))
    assert json.loads((folder / SCALE_FILE).read_text()) == {"scale": pytest.approx(summary.fit.scale), "networks": 2}
    assert with_table.measured.scale == pytest.approx(summary.fit.scale)


def test_the_tables_scale_multiplies_the_kernels_it_lacks(models, tmp_path):
    """A fitted table's scale puts the modelled kernels on the footing of the fitted ones;
    a kernel the table holds keeps its time, and report and __call__ agree."""
    plain = Estimator("torch-cpu")
    graph = _graph(models, "two_blocks")
    table = plain.kernel_table(graph)
    executed = [s for s, free in zip(kernel_signatures(table), table.free) if not free]
    overhead = plain.profile.overhead_ms
    for times in ({}, {executed[0]: 0.5}):
        scaled = Estimator("torch-cpu", measured=MeasuredKernels(tmp_path, plain.profile.fingerprint, None, times, 1.5))
        plain_times = plain.kernel_times(graph).time_ms
        expected = overhead + sum(times.get(s, 1.5 * t) for s, t, free in
                                  zip(kernel_signatures(table), plain_times, table.free) if not free)
        assert scaled(graph) == pytest.approx(expected)
        assert scaled.report(graph).attrs["total_ms"] == pytest.approx(scaled(graph))


@pytest.mark.parametrize("content, problem", [('{"scale": -1}', "scale"), ('{"scale": "2"}', "scale"),
                                              ('[1.2]', "object"), ('{"scale": 1e9}', "scale")])
def test_a_tables_scale_is_validated(tmp_path, content, problem):
    (tmp_path / SCALE_FILE).write_text(content)
    with pytest.raises(KernelTableError, match=problem):
        read_scale(tmp_path / SCALE_FILE)
    assert read_scale(tmp_path / "missing.json") == 1.0


def test_a_scale_outside_the_limits_is_not_written(tmp_path):
    with pytest.raises(KernelTableError, match="does not describe this device"):
        write_scale(tmp_path, 80.0, 3)
    assert not (tmp_path / SCALE_FILE).exists()
    write_scale(tmp_path, 1.3, 3)
    assert read_scale(tmp_path / SCALE_FILE) == pytest.approx(1.3)


def test_end_to_end_refuses_onnx_files_and_campaigns(models, tmp_path, capsys):
    import importlib.util
    spec = importlib.util.spec_from_file_location("models", models)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    onnx_file = export_onnx(module.one_block(), SHAPE, tmp_path / "net.onnx")
    with pytest.raises(ValueError, match="an ONNX file, use --method profile"):
        calibrate_for([f"{models}:one_block", str(onnx_file)], "onnxruntime-cpu", tmp_path / "m", method="end-to-end",
                      input_shape=SHAPE)
    with pytest.raises(ValueError, match="method must be one of profile, end-to-end"):
        calibrate_for([f"{models}:one_block"], "torch-cpu", tmp_path / "m", method="fit", input_shape=SHAPE)
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--sweep", "quick", "--method", "end-to-end",
                     "--out", str(tmp_path / "s")]) != 0
    assert "--method applies to calibrate --for" in capsys.readouterr().err
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--for", f"{models}:one_block", "--compile", "once",
                     "--out", str(tmp_path / "p")]) != 0
    assert "--compile applies to calibrate --for --method end-to-end" in capsys.readouterr().err
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--sweep", "smoke", "--across-rounds", "median",
                     "--out", str(tmp_path / "c")]) != 0
    assert "--across-rounds applies to calibrate --for" in capsys.readouterr().err
    # --for weighing a budgeted campaign is a campaign: it takes a campaign's protocol, not the table's
    assert cli_main(["calibrate", "--backend", "torch-cpu", "--minutes", "1", "--prior", "torch-cpu", "--for",
                     f"{models}:one_block", "--across-rounds", "median", "--out", str(tmp_path / "b")]) != 0
    assert "--across-rounds applies to calibrate --for" in capsys.readouterr().err

"""Fleet campaigns and measuring on a local Ray cluster (extra ``[fleet]``; skipped without Ray).

The cluster: a head without CPUs and two worker nodes, each advertising the fake device
resource ``fakedev`` (the first also ``board1``), all on this machine, so both nodes
report one fingerprint and share the sweep. Benchmarks are few and measured with one
round of one run: the tests check what is stored, never times."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from torch import nn

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from annette_torch import Estimator, trace  # noqa: E402
from annette_torch.calibration import load_sweep, run_campaign  # noqa: E402
from annette_torch.calibration.store import load_measurements  # noqa: E402
from annette_torch.fleet import FleetError, FleetWarning, measure_networks_on_fleet, plan_fleet_campaign, run_fleet_campaign  # noqa: E402
from annette_torch.fleet.campaign import Fleet  # noqa: E402
from annette_torch.measure import Protocol  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESOURCE = "fakedev"
TINY = dict(warmup=0, repeats=1, rounds=1, drift="none")
#: the columns of a layer row that do not depend on timing
LAYOUT = ["benchmark", "layer", "kind", "op", "status", "fused_into", "fusion"]


@pytest.fixture(scope="module")
def cluster():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        patch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        nodes = [cluster.add_node(num_cpus=1, resources={RESOURCE: 1, "board1": 1}),
                 cluster.add_node(num_cpus=1, resources={RESOURCE: 1})]
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        try:
            yield cluster, nodes
        finally:
            ray.shutdown()
            cluster.shutdown()


def sweep_file(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "fleet.csv"
    path.write_text("family,count,n,h,w,c,f,k,stride,groups,op,pool\nconv2d,%d,,8..32,,8..64,8..64,1|3,,,,\n" % count)
    return path


def driver(tmp_path: Path, address: str, sweep: Path, out: Path) -> subprocess.Popen:
    """``annette-torch calibrate --ray`` as its own process (a driver that can be killed)."""
    command = [sys.executable, "-m", "annette_torch.cli", "calibrate", "--backend", "torch-cpu", "--sweep", str(sweep),
               "--out", str(out), "--ray", address, "--ray-resource", RESOURCE, "--ray-chunk", "1", "--rounds", "1",
               "--warmup", "0", "--repeats", "1", "--drift", "none"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "driver.err", "a"))


def committed(out: Path) -> int:
    found = list(out.glob("*/networks.csv"))
    return found[0].read_text().count("\n") - 1 if found else 0


def wait_for(condition, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def check_store(out: Path, ids: set[str]) -> None:
    """Every benchmark once, measured, with its layer rows once and no orphan rows."""
    [folder] = [p.parent for p in out.glob("*/fingerprint.json")]
    _, networks, layers = load_measurements(folder)
    raw = pd.read_csv(folder / "networks.csv")
    assert set(raw["benchmark"]) == ids and raw["benchmark"].is_unique
    assert (networks["status"] == "ok").all()
    raw_layers = pd.read_csv(folder / "layers.csv")
    assert set(raw_layers["benchmark"]) == ids
    assert not raw_layers.duplicated(["benchmark", "layer", "kernel"]).any()


def test_a_fleet_stores_exactly_what_a_local_campaign_stores(cluster, tmp_path):
    specs = load_sweep("smoke")[:4]
    local = run_campaign("torch-cpu", specs, tmp_path / "local", progress=False, **TINY)
    [fleet] = run_fleet_campaign("torch-cpu", specs, str(tmp_path / "fleet"), resource=RESOURCE, progress=False,
                                 chunk=1, **TINY)
    assert Path(fleet.store).name == Path(local.store).name            # the same fingerprint, the same store folder
    assert (fleet.measured, fleet.failed) == (local.measured, local.failed) == (4, 0)
    _, local_networks, local_layers = load_measurements(local.store)
    _, fleet_networks, fleet_layers = load_measurements(fleet.store)
    assert sorted(fleet_networks["benchmark"]) == sorted(local_networks["benchmark"])
    assert list(fleet_networks.columns) == list(local_networks.columns)

    def layout(layers):
        return layers[LAYOUT].sort_values(LAYOUT).reset_index(drop=True)
    pd.testing.assert_frame_equal(layout(fleet_layers), layout(local_layers))


def test_the_dry_run_lists_the_nodes_of_the_device_and_measures_nothing(cluster, tmp_path, capsys):
    from annette_torch.cli import main

    _, nodes = cluster
    sweep = sweep_file(tmp_path, 3)
    command = ["calibrate", "--backend", "torch-cpu", "--sweep", str(sweep), "--out", str(tmp_path / "out"),
               "--ray", "test", "--ray-chunk", "1", "--dry-run"]
    assert main(command + ["--ray-resource", "board1"]) == 0
    out = capsys.readouterr().out
    assert "1 node(s), 3 of 3 benchmarks" in out and nodes[0].node_id[:8] in out and nodes[1].node_id[:8] not in out
    assert "then each next chunk to whichever node of the device is free" in out
    [plan] = plan_fleet_campaign("torch-cpu", load_sweep(sweep), str(tmp_path / "out"), resource=RESOURCE, chunk=2)
    assert {n.node_id for n in plan.nodes} == {n.node_id for n in nodes}
    assert sorted(len(ids) for ids in plan.first_chunks.values()) == [1, 2]
    assert not (tmp_path / "out").exists()
    assert main(command + ["--ray-resource", "no-such-board"]) == 2
    assert "no node of the Ray cluster at 'test' advertises the resource 'no-such-board'" in capsys.readouterr().err


def test_measurers_run_only_on_nodes_with_the_resource(cluster):
    _, nodes = cluster
    fleet = Fleet(ray, "torch-cpu", {"threads": 1}, Protocol(), "board1", "test")
    try:
        [device] = fleet.devices.values()
        [actor] = device.measurers.values()
        assert ray.get(actor.where.remote())["node_id"] == nodes[0].node_id == next(iter(device.measurers)).node_id
    finally:
        fleet.stop()
    with pytest.raises(FleetError, match="no node .* advertises the resource 'no-such-board'.*ray start"):
        Fleet(ray, "torch-cpu", {"threads": 1}, Protocol(), "no-such-board", "test")


def measuring_pids() -> list[int]:
    """Processes Ray titled after a measurer busy with a chunk (``ray::NodeMeasurer.measure``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(b"ray::NodeMeasurer.measure"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_measurer_killed_mid_run_loses_and_duplicates_nothing(cluster, tmp_path):
    sweep, out = sweep_file(tmp_path, 8), tmp_path / "store"
    summaries = []
    run = threading.Thread(target=lambda: summaries.extend(run_fleet_campaign(
        "torch-cpu", load_sweep(sweep), str(out), resource=RESOURCE, progress=False, chunk=1, **TINY)))
    with pytest.warns(FleetWarning, match="lost"):
        run.start()
        wait_for(lambda: committed(out) >= 1 and measuring_pids())
        before = committed(out)
        os.kill(measuring_pids()[0], signal.SIGKILL)
        run.join(timeout=300)
    assert before < 8 and summaries[0].measured == 8      # the lost chunk measured again, by one of the nodes
    check_store(out, {s.id for s in load_sweep(sweep)})


def test_the_driver_killed_and_started_again_continues(cluster, tmp_path):
    sweep, out = sweep_file(tmp_path, 8), tmp_path / "store"
    process = driver(tmp_path, cluster[0].address, sweep, out)
    wait_for(lambda: committed(out) >= 2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    networks_csv = next(out.glob("*/networks.csv"))
    before = networks_csv.read_bytes()
    done = committed(out)
    assert done < 8
    [again] = run_fleet_campaign("torch-cpu", load_sweep(sweep), str(out), resource=RESOURCE, progress=False,
                                 chunk=1, **TINY)
    assert again.already_done + again.measured == 8 and again.already_done >= done
    assert networks_csv.read_bytes().startswith(before[: before.rfind(b"\n") + 1])    # nothing lost or rewritten
    check_store(out, {s.id for s in load_sweep(sweep)})


def small_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10)).eval()


def test_networks_measured_on_a_fleet_node(cluster):
    from annette_torch.backends import get_backend

    def build():                            # travels by value (cloudpickle): the node need not import the tests
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()).eval()

    fingerprint, session = measure_networks_on_fleet("torch-cpu", [("net", build, (1, 3, 16, 16))],
                                                     Protocol(rounds=1, warmup=0, repeats=2, drift="none"),
                                                     resource=RESOURCE)
    assert fingerprint == get_backend("torch-cpu").fingerprint()
    assert list(session.measured) == ["net"] and session.measured["net"].time_ms > 0


@ray.remote
def estimate_remotely(estimator: Estimator, graph) -> tuple[float, float]:
    """The estimator shipped by value, and one rebuilt from its profile's name, on a worker."""
    return estimator(graph), Estimator(estimator.profile.name)(graph)


def test_the_estimator_in_a_ray_task_equals_the_local_one(cluster):
    estimator = Estimator("torch-cpu")
    graph = trace(small_net(), input_shape=(1, 3, 16, 16))
    by_value, rebuilt = ray.get(estimate_remotely.remote(estimator, graph))
    assert by_value == rebuilt == estimator(graph)


def test_adapt_measures_its_reference_networks_on_the_fleet(cluster):
    from annette_torch.backends import get_backend
    from annette_torch.transfer.adapt import few_shot

    with pytest.warns(UserWarning):                      # one sample: FewSamplesWarning
        profile = few_shot(["torch-cpu"], "torch-cpu", 1, None, 1, 0, protocol=Protocol(rounds=1, warmup=0, repeats=2,
                                                                                        drift="none"),
                           ray_address="test", ray_resource=RESOURCE)
    assert profile.adaptation is not None
    assert {k: v for k, v in profile.fingerprint.items() if k != "device"} == get_backend("torch-cpu").fingerprint()


def test_the_accuracy_benchmark_measures_on_the_fleet(cluster, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "benchmarks" / "accuracy.py")
    accuracy = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("accuracy", accuracy)
    spec.loader.exec_module(accuracy)
    from annette_torch.backends import get_backend

    nets = [accuracy.Network("a", "small", (1, 3, 8, 8), lambda: nn.Sequential(nn.Conv2d(3, 4, 3)).eval())]
    rows, path, failures = accuracy.measure_networks(get_backend("torch-cpu"), nets, tmp_path,
                                                     Protocol(rounds=1, warmup=0, repeats=2, drift="none"),
                                                     progress=False, fleet=accuracy.Fleet("test", RESOURCE))
    assert not failures and list(rows["network"]) == ["small"] and path.exists()


def test_the_distributed_search_example_agrees_with_the_driver(cluster, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("distributed_search", ROOT / "search_examples" / "distributed_search.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    summary = example.main(["--resolution", "96", "--workers", "2", "--candidates", "60", "--batch", "20"])
    out = capsys.readouterr().out
    assert summary["evaluated"] == 60 and "blocks traced" in out and "equal to the worker's" in out
    assert summary["time_ms"] == summary["driver_ms"] <= summary["budget_ms"]

"""The measuring protocol: interleaved rounds, drift correction, statistic, busy-machine check."""
import math

import numpy as np
import pytest
import torch

from annette_torch.backends import get_backend
from annette_torch.measure import machine_load
from annette_torch.measure.canary import CANARY_INPUT_SHAPE, canary_network, check_drift
from annette_torch.measure.networks import measure_networks
from annette_torch.measure.protocol import (REFERENCE_BURSTS, ItemFailed, Protocol, canary_reference, combine,
                                            interleave, statistic_ms)
from annette_torch.measure.record import LEGACY, differences, new_record, read_record, write_record


def test_statistics_on_hand_numbers():
    runs = [5.0, 1.0, 2.0, 3.0, 4.0]
    assert statistic_ms(runs, "min") == 1.0
    assert statistic_ms(runs, "median") == 3.0
    assert statistic_ms(runs, "p25") == 2.0
    assert statistic_ms(runs, "p10") == pytest.approx(1.4)
    with pytest.raises(ValueError, match="statistics are"):
        statistic_ms(runs, "mean")
    with pytest.raises(ValueError, match="statistic must be one of"):
        Protocol(statistic="mean")
    with pytest.raises(ValueError, match="rounds"):
        Protocol(rounds=0)


def test_rounds_are_interleaved_with_a_canary_before_each_item_and_after_the_last():
    calls, finished = [], []
    protocol = Protocol(rounds=2, statistic="median", drift="canary")

    def canary():
        calls.append("canary")
        return [1.0]

    def measure(key):
        calls.append(key)
        return [2.0]

    session = interleave(["A", "B", "C"], measure, protocol, canary,
                         on_finished=lambda key, results, factors: finished.append((key, len(calls))))
    assert calls[:REFERENCE_BURSTS] == ["canary"] * REFERENCE_BURSTS        # the reference, timed first
    assert [c for c in calls[REFERENCE_BURSTS:] if c != "canary"] == ["A", "B", "C", "A", "B", "C"]
    assert calls[REFERENCE_BURSTS:] == ["canary", "A", "canary", "B", "canary", "C"] * 2 + ["canary"]
    # each network is handed over once the canary after its last round has run
    assert [key for key, _ in finished] == ["A", "B", "C"]
    assert all(calls[n - 1] == "canary" for _, n in finished)
    assert session.results == {"A": [[2.0], [2.0]], "B": [[2.0], [2.0]], "C": [[2.0], [2.0]]}
    assert session.factors("B") == [1.0, 1.0]


def test_the_reference_is_the_canary_s_fast_state_even_when_the_session_starts_in_a_slow_spell():
    # a shared host: slow spells (35 % slower) for the first fifth of the timings and in
    # stretches after, half the timings in all; each burst's runs also scatter by 2 %
    rng = np.random.default_rng(0)
    calls = []

    def canary():
        slow = len(calls) < REFERENCE_BURSTS // 5 or (len(calls) // 50) % 5 in (1, 3)
        calls.append(slow)
        return list(0.2 * (1.35 if slow else 1.0) * (1 + np.abs(rng.normal(0, 0.02, 20))))

    reference_ms, runs = canary_reference(canary, "p10")
    assert len(calls) == REFERENCE_BURSTS and len(runs) == 20 * REFERENCE_BURSTS
    assert calls[0] and np.mean(calls) == 0.5                          # started in a slow spell
    assert reference_ms == pytest.approx(0.2, rel=0.02)                # the fast state
    assert statistic_ms(runs[:20], "p10") > 0.26                       # where one burst at the start would be


def test_the_median_across_rounds_ignores_one_slow_or_badly_corrected_round():
    rounds = [[1.0, 1.1, 1.2], [1.02, 1.1, 1.3], [1.4, 1.5, 1.6], [0.99, 1.05, 1.2], [1.01, 1.2, 1.3]]
    pooled = combine(rounds, [1.0] * 5, "min")
    per_round = combine(rounds, [1.0] * 5, "min", "median")
    assert pooled.time_ms == 0.99 and per_round.time_ms == 1.01      # median of 1.0 1.02 1.4 0.99 1.01
    # a canary that ran 30 % slow beside one fast round would make it 23 % too fast pooled
    factors = [1.0, 1.0, 1.0, 1.3, 1.0]
    assert combine(rounds, factors, "min").time_ms == pytest.approx(0.99 / 1.3)
    assert combine(rounds, factors, "min", "median").time_ms == pytest.approx(1.01)
    assert per_round.value("median") == pytest.approx(1.1)           # other statistics combine the same way
    assert per_round.value(corrected=False) == 1.01
    with pytest.raises(ValueError, match="across_rounds"):
        combine(rounds, [1.0] * 5, "min", "mean")
    with pytest.raises(ValueError, match="across_rounds"):
        Protocol(across_rounds="mean")
    assert "median over rounds of each round's p10" in str(Protocol(across_rounds="median"))


def test_a_failing_item_is_dropped_and_the_others_go_on():
    def measure(key):
        if key == "bad" and len(seen) > 2:
            raise ItemFailed("compile failed")
        seen.append(key)
        return [1.0]

    seen = []
    session = interleave(["ok", "bad", "also"], measure, Protocol(rounds=2, drift="none"))
    assert session.failures == {"bad": "compile failed"}
    assert set(session.results) == {"ok", "also"} and all(len(r) == 2 for r in session.results.values())
    with pytest.raises(ValueError, match="no canary"):
        interleave(["x"], measure, Protocol(drift="canary"))


def test_a_deadline_adds_rounds_until_it_passes(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("annette_torch.measure.protocol.time.monotonic", lambda: clock[0])

    def measure(key):
        clock[0] += 1.0
        return [1.0]

    done = []
    session = interleave(["a", "b"], measure, Protocol(rounds=1, drift="none"), deadline=5.0,
                         on_finished=lambda key, results, factors: done.append((key, len(results))))
    assert len(session.results["a"]) == 3 and len(session.results["b"]) == 3      # rounds started at t=0, 2, 4
    assert done == [("a", 3), ("b", 3)]


class SyntheticMachine:
    """A machine whose speed drifts with time: every run takes ``true_ms * drift(t) * noise``
    (noise only ever slows a run down) and advances the clock by its duration; preparing
    a network to run (export, compile) takes half a second more."""

    def __init__(self, drift, noise=0.01, seed=0):
        self.t = 0.0
        self.drift = drift
        self.rng = np.random.default_rng(seed)
        self.noise = noise

    def runs(self, true_ms, count):
        self.t += 0.5
        out = []
        for _ in range(count):
            ms = true_ms * self.drift(self.t) * (1 + abs(self.rng.normal(0, self.noise)))
            self.t += ms / 1e3
            out.append(ms)
        return out


TRUE_MS = {"small": 0.8, "medium": 4.0, "large": 20.0, "tiny": 0.2}


def _session(machine, protocol, reference_ms=None):
    session = interleave(list(TRUE_MS), lambda key: machine.runs(TRUE_MS[key], protocol.repeats), protocol,
                         canary=lambda: machine.runs(0.5, protocol.canary_repeats), reference_ms=reference_ms)
    measured = {key: combine(session.results[key], session.factors(key), protocol.statistic) for key in TRUE_MS}
    return session, measured


def _relative_errors(measured, corrected):
    """Each network's time over its true time, divided by the median of that ratio: 0 where
    all networks are off by one common factor (which a reference time fixes)."""
    ratios = np.array([measured[k].value(corrected=corrected) / TRUE_MS[k] for k in TRUE_MS])
    return np.abs(ratios / np.median(ratios) - 1)


def test_the_canary_recovers_a_known_synthetic_drift():
    # the machine warms up and slows down by 3 % a second (50 % over the session), in +-10 % waves
    drift = lambda t: (1 + 0.03 * t) * (1 + 0.1 * math.sin(t))  # noqa: E731
    protocol = Protocol(rounds=3, repeats=10, statistic="p10", drift="canary")
    machine = SyntheticMachine(drift)
    machine.t = 3.0                 # the session starts 3 s in; the reference given (the canary's own time)
    session, measured = _session(machine, protocol, reference_ms=0.5)
    raw, corrected = _relative_errors(measured, False), _relative_errors(measured, True)
    assert raw.max() > 0.1                           # uncorrected, the drift shows through
    assert corrected.max() < 0.015 and corrected.mean() < raw.mean() / 10
    # each round's factor is the machine's slowdown then, against the reference
    for key in TRUE_MS:
        rounds = measured[key].round_values()
        assert max(rounds) / min(rounds) < 1.05, (key, rounds)


def test_the_recorded_reference_makes_two_sessions_agree_on_a_machine_that_slowed_down():
    protocol = Protocol(rounds=3, repeats=10, drift="canary")
    first, quiet = _session(SyntheticMachine(lambda t: 1.0, seed=1), protocol)
    _, busy = _session(SyntheticMachine(lambda t: 1.3, seed=2), protocol, reference_ms=first.reference_ms)
    for key in TRUE_MS:
        assert busy[key].value(corrected=False) / quiet[key].value(corrected=False) == pytest.approx(1.3, rel=0.03)
        assert busy[key].time_ms / quiet[key].time_ms == pytest.approx(1.0, abs=0.03)


def test_without_drift_the_canary_costs_little_noise():
    protocol = Protocol(rounds=3, repeats=10, drift="canary")
    _, measured = _session(SyntheticMachine(lambda t: 1.0, noise=0.01, seed=3), protocol)
    assert _relative_errors(measured, True).max() < 0.01


PROC_STAT_BEFORE = """cpu  1000 10 500 8000 100 0 20 50 0 0
cpu0 500 5 250 4000 50 0 10 25 0 0
intr 12345
"""
PROC_STAT_AFTER = """cpu  1300 10 600 8400 100 0 20 150 0 0
cpu0 650 5 300 4200 50 0 10 75 0 0
"""


def test_the_busy_machine_check_reads_steal_and_busy_time_from_proc_stat(tmp_path):
    before, after = machine_load.parse_proc_stat(PROC_STAT_BEFORE), machine_load.parse_proc_stat(PROC_STAT_AFTER)
    assert (before.total, before.idle, before.steal) == (9680, 8100, 50)
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("3.50 2.00 1.00 3/200 1234\n")
    state = machine_load.between(before, after, threads=1, noise=0.08, interval_s=1.0, measuring=False,
                                 loadavg_path=loadavg)
    assert state.steal_share == pytest.approx(100 / 900)             # 900 ticks passed, 100 of them stolen
    assert state.busy_share == pytest.approx(1 - 400 / 900)
    assert state.load_1min == 3.5
    reasons = " ".join(state.warnings)
    assert "stole 11.1%" in reasons and "canary" not in reasons     # the canary's runs' spread is reported only
    with pytest.warns(machine_load.BusyMachineWarning, match="too busy"):
        state.warn()
    quiet = machine_load.between(before, machine_load.CpuTimes(before.total + 900, before.idle + 899, before.steal),
                                 threads=1, noise=0.30, measuring=False, loadavg_path=tmp_path / "missing")
    assert quiet.warnings == [] and quiet.load_1min is None and "canary spread 30.0%" in str(quiet)
    # over a session the canary's drift is what warns: above 2 %, not at 0.9 %
    drifted = [machine_load.between(before, before, threads=1, interval_s=600.0, drift=drift,
                                    loadavg_path=tmp_path / "missing") for drift in (0.009, 0.042)]
    assert drifted[0].warnings == [] and "canary drift 0.9%" in str(drifted[0])
    assert len(drifted[1].warnings) == 1 and "drifted 4.2% over the session" in drifted[1].warnings[0]
    with pytest.raises(ValueError, match="no aggregate"):
        machine_load.parse_proc_stat("intr 1\n")
    assert machine_load.read_cpu_times(tmp_path / "missing") is None
    assert "steal 11.1%" in str(state) and "load 3.50" in str(state)


def test_protocol_record_round_trip_and_differences(tmp_path):
    protocol = Protocol()
    record = new_record(protocol)
    assert read_record(tmp_path) is None
    write_record(tmp_path, {**record, "canary_ms": 0.4})
    assert read_record(tmp_path)["canary_ms"] == 0.4
    assert differences(read_record(tmp_path), protocol) == []
    assert differences(LEGACY, protocol) == ["statistic 'median', not 'p10'"]
    assert differences(LEGACY, Protocol(drift="canary")) == ["statistic 'median', not 'p10'",
                                                             "drift correction 'none', not 'canary'"]
    assert differences(LEGACY, Protocol(statistic="median")) == []
    assert differences(read_record(tmp_path), Protocol(across_rounds="median")) == [
        "rounds combined by 'pool', not 'median'"]
    assert differences(read_record(tmp_path), Protocol(across_rounds="median"), statistic=False) != []
    write_record(tmp_path, {"statistic": "p10", "drift": "none", "canary_ms": None})   # written before the field
    assert read_record(tmp_path)["across_rounds"] == "pool"
    (tmp_path / "protocol.json").write_text('{"statistic": "p10", "across_rounds": "mean", "drift": "none"}')
    with pytest.raises(ValueError, match="across_rounds"):
        read_record(tmp_path)
    (tmp_path / "protocol.json").write_text('{"statistic": "p10", "drift": "canary", "canary_ms": -1}')
    with pytest.raises(ValueError, match="canary_ms"):
        read_record(tmp_path)


def test_the_canary_is_fixed_and_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b = canary_network(), canary_network()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert a(torch.zeros(CANARY_INPUT_SHAPE)).shape == (1, 10)


def test_measure_networks_on_a_real_backend_in_a_few_seconds():
    backend = get_backend("torch-cpu")
    items = [("conv", lambda: torch.nn.Conv2d(3, 8, 3), (1, 3, 16, 16)),
             ("linear", lambda: torch.nn.Linear(16, 4), (1, 16))]
    done = []
    session = measure_networks(backend, items, Protocol(rounds=2, warmup=1, repeats=2, canary_repeats=2, drift="canary"),
                               on_measured=lambda key, m: done.append(key), progress=False, warn=False)
    assert done == ["conv", "linear"] and session.failures == {}
    for measured in session.measured.values():
        assert measured.time_ms > 0 and len(measured.runs_ms) == 4 and len(measured.factors) == 2
    assert session.session.reference_ms > 0 and "machine while measuring" in session.report()


def test_the_canary_correction_is_refused_where_the_canary_would_be_deployed_anew():
    from annette_torch.backends.zcu102 import Zcu102

    check_drift(get_backend("torch-cpu"), "canary")               # in-process: the canary is cheap
    board = Zcu102.__new__(Zcu102)                 # no board needed to ask
    check_drift(board, "none")
    with pytest.raises(ValueError, match="use --drift none"):
        check_drift(board, "canary")
    assert Protocol().drift == "none"                             # the default (docs/accuracy.md)


def test_compile_once_builds_each_network_once_times_it_every_round_and_releases_it_after_its_last():
    import argparse
    import contextlib

    from annette_torch.backends.base import BackendError
    from annette_torch.measure.arguments import add_protocol_arguments, protocol_from

    backend, open_now, entered, builds = get_backend("torch-cpu"), set(), [], []

    class Counting:
        """torch-cpu, counting the compiled networks it holds; the network "bad" fails to compile."""

        def __getattr__(self, name):
            return getattr(backend, name)

        @contextlib.contextmanager
        def prepared(self, model, input_shape):
            if isinstance(model, torch.nn.Identity):
                raise BackendError("torch-cpu", "compile", ValueError("cannot compile"))
            with backend.prepared(model, input_shape) as timed:
                key = input_shape[-1]
                open_now.add(key)
                entered.append(key)
                try:
                    yield timed
                finally:
                    open_now.discard(key)

    def build(key, module):
        return lambda: builds.append(key) or module

    items = [("conv", build("conv", torch.nn.Conv2d(3, 8, 3)), (1, 3, 16, 16)),
             ("bad", build("bad", torch.nn.Identity()), (1, 3, 8, 8)),
             ("linear", build("linear", torch.nn.Linear(12, 4)), (1, 12))]
    held_when_done = {}
    session = measure_networks(Counting(), items, Protocol(rounds=3, warmup=1, repeats=2, compile_once=True),
                               on_measured=lambda key, m: held_when_done.setdefault(key, set(open_now)),
                               progress=False, warn=False)
    assert builds == ["conv", "bad", "linear"]                    # built and compiled once each
    assert entered[-2:] == [16, 12] and open_now == set()         # after the canary; all released at the end
    assert 16 not in held_when_done["conv"] and 12 not in held_when_done["linear"]    # ... each after its last round
    assert list(session.failures) == ["bad"] and "cannot compile" in session.failures["bad"]
    assert all(len(m.round_sizes) == 3 and len(m.runs_ms) == 6 for m in session.measured.values())

    parser = argparse.ArgumentParser()
    add_protocol_arguments(parser)
    assert not protocol_from(parser.parse_args([]), backend).compile_once
    assert protocol_from(parser.parse_args(["--compile", "once"]), backend).compile_once
    assert "compiled once" in str(Protocol(compile_once=True))
    without = argparse.ArgumentParser()
    add_protocol_arguments(without, whole_networks=False)          # a campaign compiles anew every round
    assert not protocol_from(without.parse_args([]), backend).compile_once
    with pytest.raises(SystemExit):
        without.parse_args(["--compile", "once"])
    with pytest.raises(ValueError, match="compile_once"):
        Protocol(compile_once="yes")
    assert protocol_from(parser.parse_args(["--across-rounds", "median"]), backend).across_rounds == "median"
    assert protocol_from(without.parse_args([]), backend).across_rounds == "pool"
    with pytest.raises(SystemExit):
        without.parse_args(["--across-rounds", "median"])


def test_adapt_and_check_time_whole_networks_as_the_ground_truth_does_where_the_runtime_keeps_a_model():
    """``adapt`` and ``check`` default to the accuracy benchmark's ground-truth protocol on a
    runtime that keeps a compiled model (12 rounds, compiled once, canary, median over
    rounds); an option given keeps its value; a board keeps the plain defaults (no canary:
    it would deploy it anew)."""
    from annette_torch.backends.zcu102 import Zcu102
    from annette_torch.cli import build_parser
    from annette_torch.measure.arguments import whole_network_protocol
    from annette_torch.measure.networks import NETWORK_PROTOCOL, network_protocol

    cpu, board = get_backend("torch-cpu"), Zcu102.__new__(Zcu102)
    assert network_protocol(cpu) == NETWORK_PROTOCOL and network_protocol(board) == Protocol()
    assert (NETWORK_PROTOCOL.rounds, NETWORK_PROTOCOL.drift, NETWORK_PROTOCOL.compile_once,
            NETWORK_PROTOCOL.across_rounds) == (12, "canary", True, "median")
    parser = build_parser()
    for command in (["check", "--profile", "torch-cpu"],
                    ["adapt", "--from", "torch-cpu", "--backend", "torch-cpu", "--samples", "10", "--out", "p.json"]):
        assert whole_network_protocol(parser.parse_args(command), cpu) == NETWORK_PROTOCOL
        assert whole_network_protocol(parser.parse_args(command), board) == Protocol()
        given = whole_network_protocol(parser.parse_args(command + ["--rounds", "3", "--compile", "each-round"]), cpu)
        assert (given.rounds, given.compile_once, given.drift, given.across_rounds) == (3, False, "canary", "median")

"""Calibration: benchmark networks measured on a real runtime, stored for fitting.

    from annette_torch.calibration import load_sweep, build_benchmark, run_campaign

    specs = load_sweep("quick")                     # annette_torch/calibration/sweeps/quick.csv (package data)
    model, input_shape = build_benchmark(specs[0])  # an nn.Module benchmark network
    run_campaign("openvino-cpu", "quick", "calibration/data", threads=1)

Flow: sweep file (:mod:`.sweep`) → benchmark generator (:mod:`.generator`) → backend
profile (:mod:`annette_torch.backends`: export, compile, run, per-kernel report) →
graph matcher (:mod:`.matcher`: kernels → layers, fused / not-fused / possibly-fused) →
measurement store (:mod:`.store`: append-only, resumable), driven by :mod:`.campaign`.
"""
from .campaign import CampaignStopped, CampaignSummary, dry_run_campaign, measure_benchmark, run_campaign
from .generator import FAMILIES, build_benchmark
from .matcher import match_kernels
from .store import MeasurementStore, StoreError, load_measurements
from .sweep import BenchmarkSpec, SweepError, load_sweep

__all__ = ["FAMILIES", "BenchmarkSpec", "CampaignStopped", "CampaignSummary", "MeasurementStore", "StoreError", "SweepError",
           "build_benchmark", "dry_run_campaign", "load_measurements", "load_sweep", "match_kernels", "measure_benchmark",
           "run_campaign"]

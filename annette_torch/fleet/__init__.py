"""Fleets: calibration and measuring spread over the nodes of a Ray cluster (optional extra ``[fleet]``).

    from annette_torch.fleet import run_fleet_campaign
    run_fleet_campaign("torch-cpu", "quick", "calibration/data", address="auto")

:mod:`.cluster` (connecting, the nodes that advertise a device as a custom resource),
:mod:`.measurer` (the Ray actor that measures on one node, with the campaign's own
worker), :mod:`.campaign` (``annette-torch calibrate --ray``: the driver, the only
writer of the stores) and :mod:`.networks` (networks measured on a fleet node for
``adapt --ray`` and the accuracy benchmark). Ray is imported when a fleet is used,
never by ``import annette_torch``.
"""
from .campaign import DevicePlan, FleetSummary, FleetWarning, plan_fleet_campaign, run_fleet_campaign
from .cluster import AUTO, LOCAL, FleetError, connected
from .networks import device_fingerprint, measure_networks_on_fleet

__all__ = ["AUTO", "DevicePlan", "FleetError", "FleetSummary", "FleetWarning", "LOCAL", "connected", "device_fingerprint", "measure_networks_on_fleet",
           "plan_fleet_campaign", "run_fleet_campaign"]

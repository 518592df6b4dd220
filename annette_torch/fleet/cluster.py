"""Connecting to a Ray cluster and finding the nodes that advertise a device.

A node beside a device advertises it as a Ray custom resource (``ray start --address
HEAD:6379 --resources '{"zcu102": 1}'``); :func:`device_nodes` lists the live nodes
that do. Ray is imported here, on first use, never by ``import annette_torch``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

#: what ``--ray`` takes besides a cluster address
LOCAL, AUTO = "local", "auto"


class FleetError(RuntimeError):
    """The fleet cannot do what was asked: Ray is missing, the cluster cannot be reached,
    or no node advertises the device (the message says what to start)."""


def ray_module() -> Any:
    """The ``ray`` module; :class:`FleetError` saying how to install it when it is missing."""
    try:
        import ray
    except ImportError:
        raise FleetError("measuring through a fleet needs Ray: pip install 'annette_torch[fleet]' "
                         "(or pip install ray)") from None
    return ray


@contextlib.contextmanager
def connected(address: str, resource: str | None = None, local_cpus: int = 1) -> Iterator[Any]:
    """For the block, this process connected to the Ray cluster at ``address`` as its
    driver: ``auto`` a running cluster (``ray start --head``), ``local`` a cluster of this
    machine started for the block with ``local_cpus`` CPUs (advertising ``resource`` once, if given),
    or a ``HOST:PORT`` / ``ray://`` address. A process already connected (``ray.init``
    called by the caller) is used as it is and left connected."""
    ray = ray_module()
    if ray.is_initialized():
        yield ray
        return
    options: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": False}
    try:
        if address == LOCAL:
            ray.init(num_cpus=local_cpus, resources={resource: 1} if resource else {}, **options)
        else:
            options.pop("include_dashboard")
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise FleetError(f"cannot connect to the Ray cluster at {address!r}: {error}; start a head with "
                         f"`ray start --head` (then --ray auto) or use --ray local") from None
    try:
        yield ray
    finally:
        ray.shutdown()


@dataclass(frozen=True)
class Node:
    """A live node of the cluster: its Ray node id and the address it runs on."""

    node_id: str
    address: str

    @property
    def label(self) -> str:
        """Short name for tables: address and the first 8 characters of the id."""
        return f"{self.address}/{self.node_id[:8]}"


def device_nodes(ray: Any, resource: str) -> list[Node]:
    """The live nodes advertising ``resource``, in the order Ray lists them."""
    return [Node(n["NodeID"], n.get("NodeManagerAddress", "?")) for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get(resource, 0) > 0]


def require_nodes(ray: Any, resource: str, address: str) -> list[Node]:
    """:func:`device_nodes`, or :class:`FleetError` saying how to start one when there are none."""
    nodes = device_nodes(ray, resource)
    if not nodes:
        raise FleetError(f"no node of the Ray cluster at {address!r} advertises the resource {resource!r}; beside "
                         f"the device run `ray start --address HEAD_IP:6379 --resources '{{\"{resource}\": 1}}'` "
                         f"(see calibration/README.md)")
    return nodes


def on_node(ray: Any, node: Node) -> Any:
    """The scheduling strategy that runs a task or actor on ``node`` only (never elsewhere)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node.node_id, soft=False)

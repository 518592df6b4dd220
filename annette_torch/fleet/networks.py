"""Networks measured end to end on a fleet node: ``adapt --ray`` and the accuracy benchmark.

    fingerprint, session = measure_networks_on_fleet("ncs2", items, protocol, address="auto")
    device_fingerprint("ncs2", address="auto")     # which results folder a session's numbers go to

The session (:func:`annette_torch.measure.networks.measure_networks`, the same protocol
as a local one) runs as one Ray task on a node advertising the device resource, in a
Ray worker process of its own (``max_calls=1``: the backend may set that process up for
measuring, :meth:`~annette_torch.backends.Backend.prepare_process`, and it is not reused).
A node that dies mid-session costs the session, not the results already written: Ray
runs the task again on another node advertising the resource, or on the same one once
it is back (:data:`RETRIES` times). The items' builders travel to the node by value
(cloudpickle), so they may be closures. The callers write their results files here, on
the driver, from what comes back; callers with many networks measure them in chunks
(one call per chunk) so that a kill loses at most one chunk.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence

from ..backends import get_backend
from ..measure import Measured, Protocol
from ..measure.networks import Item, NetworkSession, measure_networks
from .cluster import AUTO, connected, require_nodes

#: how often Ray runs a session again after its node died
RETRIES = 3


def _measure_on_node(backend_name: str, options: dict[str, Any], items: Sequence[Item], protocol: Protocol,
                     reference_ms: float | None) -> tuple[dict[str, Any], NetworkSession]:
    """The Ray task: the node's fingerprint and its session (the process set up for measuring)."""
    backend = get_backend(backend_name, **options)
    backend.prepare_process()
    return backend.fingerprint(), measure_networks(backend, items, protocol, reference_ms, progress=False)


def _fingerprint_on_node(backend_name: str, options: dict[str, Any]) -> dict[str, Any]:
    return get_backend(backend_name, **options).fingerprint()


def device_fingerprint(backend_name: str, address: str = AUTO, resource: str | None = None, threads: int = 1,
                       precision: str | None = None, backend_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The backend fingerprint on a node of the fleet at ``address`` that advertises
    ``resource`` (default the backend's name): where the results of
    :func:`measure_networks_on_fleet` belong."""
    resource = resource or backend_name
    options = {"threads": threads, "precision": precision, **(backend_options or {})}
    with connected(address, resource, threads) as ray:
        require_nodes(ray, resource, address)
        task = ray.remote(num_cpus=0, max_retries=RETRIES)(_fingerprint_on_node).options(resources={resource: 1})
        return ray.get(task.remote(backend_name, options))


def measure_networks_on_fleet(backend_name: str, items: Sequence[Item], protocol: Protocol, address: str = AUTO,
                              resource: str | None = None, threads: int = 1, precision: str | None = None,
                              backend_options: dict[str, Any] | None = None, reference_ms: float | None = None,
                              on_start: Callable[[float | None], None] | None = None,
                              on_measured: Callable[[Hashable, Measured], None] | None = None
                              ) -> tuple[dict[str, Any], NetworkSession]:
    """Measure ``items`` (key, builder, input shape) with ``protocol`` on one node of the
    fleet at ``address`` that advertises ``resource`` (default the backend's name); see
    the module doc. Returns the node's backend fingerprint and the session;
    ``on_start(reference_ms)`` and ``on_measured(key, measured)`` are called as for
    :func:`~annette_torch.measure.networks.measure_networks`, here, once the session is back."""
    resource = resource or backend_name
    options = {"threads": threads, "precision": precision, **(backend_options or {})}
    with connected(address, resource, threads) as ray:
        require_nodes(ray, resource, address)
        task = ray.remote(num_cpus=0, max_calls=1, max_retries=RETRIES, retry_exceptions=False)(_measure_on_node)
        task = task.options(resources={resource: 1})
        fingerprint, session = ray.get(task.remote(backend_name, options, list(items), protocol, reference_ms))
    if on_start is not None:
        on_start(session.session.reference_ms)
    if on_measured is not None:
        for key, measured in session.measured.items():
            on_measured(key, measured)
    return fingerprint, session

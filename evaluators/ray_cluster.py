"""Joining or starting the Ray cluster vevo runs on: the one place that does it, for the ``ray`` executor and the
``vllm-ray:`` proposer replicas (a process is connected to at most one Ray cluster, so both share it).

Decisions:

* No address (or a loopback one): a Ray started here is a one-machine cluster and keeps its sockets on 127.0.0.1
  (``loopback_only``). Ray would otherwise bind its routable address, and a Ray cluster runs code for whoever
  reaches it.
* No address means a new local Ray (``ray.init(address="local")``). A bare ``ray.init()`` joins the newest
  cluster it finds on the machine (``RAY_ADDRESS``, or ``/tmp/ray/ray_current_cluster``): on a shared box that
  was another user's test cluster, whose teardown then killed this run's actors. Joining an existing one is
  what ``auto`` or an address says.
* A ``HOST:PORT`` address is probed with a plain TCP connect first: ``ray.init`` retries a dead address for
  minutes, the probe fails in seconds with one line.
* Already connected (an earlier ``connect`` in this process, or a caller's own ``ray.init``): that cluster is used
  and ``connect`` reports that the caller does not own it, so only the owner calls ``ray.shutdown``.
* Every failure is one line, raised as the caller's error type (``ExecutorError`` for the executor,
  ``BackendError`` for the proposer), so each layer keeps its own error vocabulary.
"""
from __future__ import annotations

import logging
import os

from .errors import ExecutorError
from .netaddr import is_loopback_host


def lost_errors() -> tuple[type[BaseException], ...]:
    """What a lost actor or node looks like to the driver (the names this Ray version has)."""
    import ray

    return tuple(getattr(ray.exceptions, n) for n in (
        "RayActorError", "ActorUnavailableError", "ActorDiedError", "NodeDiedError", "ObjectLostError",
        "OwnerDiedError", "WorkerCrashedError", "LocalRayletDiedError", "ActorUnschedulableError")
        if hasattr(ray.exceptions, n))


def loopback_only() -> None:
    """Keep a Ray started by this process on 127.0.0.1. Ray 2.x reads this switch at import time (its own
    processes import it anew and inherit the variable; this process's copy is set here)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
    except (ImportError, AttributeError):  # another Ray layout: it binds where it binds
        pass


def host_port(address: str, error: type[Exception] = ExecutorError) -> tuple[str, int]:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise error(f"ray: bad address {address!r} (expected HOST:PORT or auto)")
    return host.strip("[]"), int(port)


def is_loopback(address: str, error: type[Exception] = ExecutorError) -> bool:
    if address == "auto":
        return False
    return is_loopback_host(host_port(address, error)[0])


def check_reachable(address: str, timeout: float = 5.0, error: type[Exception] = ExecutorError) -> None:
    """Fail in seconds with one line where ray.init would retry a dead address for minutes."""
    import socket

    host, port = host_port(address, error)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise error(f"ray: cannot reach the cluster at {address}: {e.strerror or e}") from None


def connect(address: str | None, error: type[Exception] = ExecutorError) -> bool:
    """Join the cluster at ``address`` (None: start a local one on 127.0.0.1) unless this process already is in
    one. Returns True when this call connected (the caller then owns the connection and shuts it down)."""
    import ray

    if ray.is_initialized():
        return False
    if not address or is_loopback(address, error):
        loopback_only()
    if address and address != "auto":
        check_reachable(address, error=error)
    try:
        ray.init(address=address or "local", include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False, configure_logging=False)
    except Exception as e:  # ConnectionError, ValueError, RuntimeError: all one line for the user
        raise error(" ".join(f"ray: cannot connect to {address or 'a new local cluster'}: "
                             f"{type(e).__name__}: {e}".split())[:300]) from None
    return True

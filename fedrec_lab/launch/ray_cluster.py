"""Ray for a launch: a private local instance (sized by ``--workers``), or an existing cluster."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from fedrec_lab.launch.run_config import ConfigError

# RAY_ADDRESS=local: Ray starts a new local instance, even when a `ray start --head` on this
# machine left its address in /tmp/ray/ray_current_cluster (which ray.init() would join).
LOCAL_RAY = "local"
# Sizes of a new local instance: Ray refuses them when joining a cluster.
RAY_INIT_SIZES = ("init-args-num-cpus", "init-args-num-gpus")


def worker_entries(workers: int, cores: int | None = None) -> list[str]:
    """``--federation-config`` entries that start ``workers`` Ray workers (ClientApp actors)
    on a new local Ray instance of ``cores`` CPUs (default: this machine's).

    Flower starts one actor per ``client-resources-num-cpus`` of Ray's CPUs, a whole number:
    up to ``cores`` workers share the cores; more get one CPU each of a Ray instance told it
    has ``workers`` CPUs (``init-args-num-cpus``). More workers than cores pays off with
    one-user nodes (faithful mode), whose messages mostly wait on Flower's own process.
    """
    if workers < 1:
        raise ConfigError(f"--workers {workers}: give at least 1 Ray worker")
    cores = cores or os.cpu_count() or 1
    entries = [f"client-resources-num-cpus={max(1, cores // workers)}"]
    if workers > cores:
        entries.append(f"init-args-num-cpus={workers}")
    return entries


def resolve_ray_address(
    address: str | None, federation: Sequence[str] = (), timeout: float = 5.0
) -> str:
    """The ``RAY_ADDRESS`` the simulation gets: ``local`` for None, else ``address`` checked.

    Raises :class:`ConfigError` when ``address`` is not ``HOST:PORT``, when no Ray head
    answers there, or when ``federation`` sizes a local instance (``init-args-num-*``).
    """
    if address is None or address == LOCAL_RAY:
        return LOCAL_RAY
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--ray-address {address}: give the Ray head's HOST:PORT, the address "
            "`ray start --head` printed (e.g. 10.0.0.5:6379)"
        )
    sizes = [entry for entry in federation if entry.split("=", 1)[0].strip() in RAY_INIT_SIZES]
    if sizes:
        raise ConfigError(
            f"--federation {' '.join(sizes)} sizes a new local Ray instance; on the cluster at "
            f"{address} the nodes' `ray start --num-cpus/--num-gpus` do: drop it"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as error:
        raise ConfigError(
            f"no Ray cluster answers at {address} ({error}). Start its head there with "
            f"`ray start --head --port={port}` and its workers with `ray start "
            f"--address={address}`, check it with `ray status --address={address}`, or leave "
            "out --ray-address (and RAY_ADDRESS) to run on a private local Ray instance."
        ) from None
    return address

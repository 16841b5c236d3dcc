"""Multi-host start-up: one call to join the processes of a job before building a mesh."""
from __future__ import annotations

import os
from collections.abc import Sequence

import jax

__all__ = ["initialize_distributed"]

# Environment variables that mark a managed cluster jax.distributed can auto-detect.
_CLUSTER_MARKERS = {
    "SLURM": ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
              "SLURM_LOCALID"),
    "Open MPI": ("OMPI_MCA_orte_hnp_uri",),
    "Kubernetes (JobSet)": ("KUBERNETES_SERVICE_HOST", "JOB_COMPLETION_INDEX"),
    "Cloud TPU": ("TPU_WORKER_HOSTNAMES",),
}


def _detected_cluster() -> str | None:
    for name, variables in _CLUSTER_MARKERS.items():
        if all(v in os.environ for v in variables):
            return name
    return None


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: int | Sequence[int] | None = None,
    initialization_timeout: int = 300,
) -> tuple[int, int]:
    """Join this process to a multi-process JAX job (``jax.distributed.initialize``).

    Each argument falls back to the environment: ``JAX_COORDINATOR_ADDRESS`` (``host:port``
    of process 0), ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``; failing those, a cluster JAX
    detects by itself (SLURM, Open MPI, Kubernetes JobSet, Cloud TPU).  Call it once, before
    any other JAX call, on every process; then build a mesh over ``jax.devices()`` (all
    processes' devices) and pass it to :func:`layerlab.loop.fit` with batches assembled by
    ``jax.make_array_from_process_local_data``.  A second call is a no-op.

    Args:
      coordinator_address: ``"host:port"`` of the coordinator (process 0).
      num_processes: total number of processes.
      process_id: this process's rank in ``[0, num_processes)``.
      local_device_ids: devices this process uses (default: all local devices).
      initialization_timeout: seconds to wait for the other processes.

    Returns:
      ``(process_index, process_count)``.

    Raises:
      RuntimeError: no coordinator given and no cluster environment detected.
    """
    if jax.distributed.is_initialized():
        return jax.process_index(), jax.process_count()
    env = os.environ
    coordinator_address = coordinator_address or env.get("JAX_COORDINATOR_ADDRESS")
    if num_processes is None and env.get("JAX_NUM_PROCESSES"):
        num_processes = int(env["JAX_NUM_PROCESSES"])
    if process_id is None and env.get("JAX_PROCESS_ID"):
        process_id = int(env["JAX_PROCESS_ID"])
    explicit = None not in (coordinator_address, num_processes, process_id)
    cluster = _detected_cluster()
    if not explicit and cluster is None:
        raise RuntimeError(
            "initialize_distributed: no multi-process environment found. Set "
            "JAX_COORDINATOR_ADDRESS=host:port (of process 0), JAX_NUM_PROCESSES and "
            "JAX_PROCESS_ID on every process (or pass them as arguments), or launch under "
            "SLURM / Open MPI / Kubernetes / Cloud TPU, which JAX detects. For a single "
            "process, do not call it: fit(..., mesh=...) works on the local devices as is. "
            f"(seen: coordinator={coordinator_address!r}, num_processes={num_processes!r}, "
            f"process_id={process_id!r})"
        )
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        initialization_timeout=initialization_timeout,
    )
    return jax.process_index(), jax.process_count()

"""The ``sample`` command's launch flags: ``--coordinator``, ``--num-processes``, ``--process-id`` and ``--distributed``,
passed to ``jax.distributed.initialize`` before anything compiles, so that ``--data`` is opened per process (each
process its own rows) and ``auto_sample`` runs data-parallel.

A flag not given is read from the environment: ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``,
or, for a Kubernetes indexed job, ``JOB_COMPLETION_INDEX`` (the pod's index) as the process id; what is still unknown
is left to JAX's own detection of the cluster (SLURM under ``srun``, Open MPI, ...). With all three known, JAX's
detection is off, so it does not probe a Kubernetes API it may not reach.
"""

from __future__ import annotations

import argparse
import os
from typing import Mapping

PROCESS_ID_VARIABLES = ("JAX_PROCESS_ID", "JOB_COMPLETION_INDEX")
"""Where the process id is read from when ``--process-id`` is not given, in this order."""


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """The launch flags of ``sample``, as one argument group."""
    g = parser.add_argument_group(
        "several processes (jax.distributed): each process reads only its rows of --data and sampling is data-parallel"
    )
    g.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="address of process 0's coordinator service (default: $JAX_COORDINATOR_ADDRESS, or the cluster's)",
    )
    g.add_argument(
        "--num-processes",
        type=int,
        default=None,
        help="processes in all (default: $JAX_NUM_PROCESSES, or the cluster's)",
    )
    g.add_argument(
        "--process-id",
        type=int,
        default=None,
        help="this process's id, 0 to N-1 (default: $JAX_PROCESS_ID, $JOB_COMPLETION_INDEX, or the cluster's)",
    )
    g.add_argument(
        "--distributed",
        action="store_true",
        help="start jax.distributed from the environment alone (SLURM's srun, or the variables above)",
    )


def env_int(environ: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` set in ``environ``, as an integer (an error naming it if it is not one)."""
    for name in names:
        text = environ.get(name)
        if text is not None and text.strip():
            if not text.strip().isdigit():
                raise ValueError(f"${name}={text!r}: expected a non-negative integer")
            return int(text)
    return None


def launch_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict | None:
    """``jax.distributed.initialize``'s keywords from the flags and ``environ``; None for one process (no flag)."""
    environ = os.environ if environ is None else environ
    given = (args.coordinator, args.num_processes, args.process_id)
    if not args.distributed and all(v is None for v in given):
        return None
    coordinator = args.coordinator or environ.get("JAX_COORDINATOR_ADDRESS") or None
    count = args.num_processes if args.num_processes is not None else env_int(environ, ("JAX_NUM_PROCESSES",))
    pid = args.process_id if args.process_id is not None else env_int(environ, PROCESS_ID_VARIABLES)
    if coordinator is not None:
        host, sep, port = coordinator.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"--coordinator {coordinator!r}: expected HOST:PORT, e.g. 127.0.0.1:12345")
    if count is not None and count < 1:
        raise ValueError(f"--num-processes {count}: expected at least 1")
    if pid is not None and (pid < 0 or (count is not None and pid >= count)):
        raise ValueError(f"--process-id {pid}: expected 0 to {'N-1' if count is None else count - 1}")
    settings = {"coordinator_address": coordinator, "num_processes": count, "process_id": pid}
    if None not in settings.values():
        settings["cluster_detection_method"] = "deactivate"
    return settings


def start_processes(args: argparse.Namespace) -> int:
    """``jax.distributed.initialize`` with the launch flags (nothing without them); the number of processes."""
    settings = launch_settings(args)
    if settings is None:
        return 1
    import jax

    jax.distributed.initialize(**settings)
    return jax.process_count()

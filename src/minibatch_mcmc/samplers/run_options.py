"""How ``sample`` runs its chains, apart from what it draws: blocks, progress, devices, data sharding, checkpoints."""

from __future__ import annotations

import os
from typing import Any, NamedTuple, Sequence


class RunOptions(NamedTuple):
    """``sample``'s run options as one record (``sample(..., run=RunOptions(...))``; each given as a keyword replaces its field).

    Args:
        block_size: Steps per jitted block at most (the unit of progress, interruption and checkpoints); a run it does not
            divide runs in equal shorter blocks where they divide it (400 steps: 2 x 200), so one block length compiles.
        progress: Show a progress bar, redrawn about every half second.
        devices: A list of devices, a count, or ``"all"``: the chains are split over a 1-D device mesh
            (``num_chains`` a multiple of the device count).
        data_sharding: A sharding for the data; None: the data are replicated on every device.
        checkpoint_dir: A directory where every finished block is written. It is checked writable and locked for the
            run first: a second run started on it is refused before writing (``SECURITY.md``).
        resume: Reload the finished blocks of ``checkpoint_dir`` and continue.
    """

    block_size: int = 250
    progress: bool = True
    devices: Sequence[Any] | int | str | None = None
    data_sharding: Any = None
    checkpoint_dir: str | os.PathLike | None = None
    resume: bool = False


def merged_run(run: RunOptions | None, **options: Any) -> RunOptions:
    """``run`` (default: ``RunOptions()``) with each option given as a keyword in its place; an unknown one is refused."""
    if run is not None and not isinstance(run, RunOptions):
        raise TypeError(f"run={run!r} is not a RunOptions: build one with RunOptions(block_size=..., ...)")
    unknown = sorted(set(options) - set(RunOptions._fields))
    if unknown:
        raise TypeError(f"{unknown} are not run options of sample; they are {', '.join(RunOptions._fields)}")
    return (RunOptions() if run is None else run)._replace(**options)

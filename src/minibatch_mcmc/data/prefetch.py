"""Read-ahead of the minibatches of upcoming steps for an out-of-core source.

The minibatch positions of a step come from a keyed permutation, so the first chunk each step of
a minibatch test will ask for is computable on the host before the step runs (the plan,
``minibatch_mcmc.samplers.prefetch_plan``, asks the test's ``first_rows``). ``prefetch`` wraps a ``HostData`` with a background
thread that reads the planned rows of the next ``depth`` steps; when a step's gather asks for
exactly those rows it is served from memory. Any other gather (growth chunks, full-data passes, a
run with another key) goes to the underlying reader, so prefetching never changes results, only
where the read happens.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from minibatch_mcmc.checks import check_int
from minibatch_mcmc.data.host import HostData


class PrefetchReader:
    """A reader that serves planned gathers from rows read ahead by a background thread."""

    def __init__(self, inner, plan: np.ndarray, depth: int = 8):
        depth = check_int(depth, "prefetch depth", low=1)
        plan = np.asarray(plan)
        if plan.ndim < 2 or plan.size == 0:
            raise ValueError(f"prefetch plan has shape {plan.shape}; expected (steps, ..., m) row indices")
        if plan.min() < 0 or plan.max() >= inner.n:
            raise ValueError(f"prefetch plan has row indices outside [0, {inner.n})")
        self.inner = inner
        self.n, self.specs, self.treedef = inner.n, inner.specs, inner.treedef
        self._plan = plan.reshape(plan.shape[0], -1).astype(np.int64)
        self._step_of = {row.tobytes(): t for t, row in enumerate(self._plan)}
        self.depth = int(depth)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.reset()

    def reset(self) -> None:
        """(Re)start reading ahead from step 0 of the plan, e.g. before a second run with the same key."""
        if self._thread is not None:
            self.close()
        self.hits = 0
        self.misses = 0
        self._ready: OrderedDict[int, list[np.ndarray]] = OrderedDict()
        self._next = 0
        self._consumed = 0
        self._stop = False
        self._thread = threading.Thread(target=self._work, name="minibatch-prefetch", daemon=True)
        self._thread.start()

    @property
    def validated(self) -> bool:
        """Validation state of the underlying reader."""
        return bool(getattr(self.inner, "validated", False))

    @validated.setter
    def validated(self, value: bool) -> None:
        self.inner.validated = value

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._stop and self._next < len(self._plan) and self._next >= self._consumed + self.depth:
                    self._cond.wait()
                if self._stop or self._next >= len(self._plan):
                    return
                t = self._next
                self._next += 1
            rows = self.inner.gather(self._plan[t])
            with self._cond:
                if t >= self._consumed:
                    self._ready[t] = rows

    def gather(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx``: from the read-ahead buffer when ``idx`` is a planned first chunk, else from the reader."""
        t = self._step_of.get(idx.tobytes()) if idx.dtype == np.int64 else None
        if t is None:
            return self.inner.gather(idx)
        with self._cond:
            rows = self._ready.pop(t, None)
            self._consumed = max(self._consumed, t + 1)
            self._next = max(self._next, self._consumed)
            for old in [s for s in self._ready if s < self._consumed]:
                del self._ready[old]
            self._cond.notify_all()
        if rows is None:
            self.misses += 1
            return self.inner.gather(idx)
        self.hits += 1
        return rows

    def read_range(self, start: int, stop: int) -> list[np.ndarray]:
        """Contiguous rows, straight from the underlying reader."""
        return self.inner.read_range(start, stop)

    def close(self) -> None:
        """Stop the background thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def __repr__(self) -> str:
        return f"PrefetchReader({self.inner!r}, depth={self.depth})"


def prefetch(source: HostData, plan: np.ndarray, depth: int = 8) -> HostData:
    """Wrap an out-of-core source so the planned minibatches of the next ``depth`` steps are read ahead."""
    if not isinstance(source, HostData):
        raise ValueError(f"prefetch needs an out-of-core HostData source; got {type(source).__name__}")
    return HostData(PrefetchReader(source.reader, plan, depth))

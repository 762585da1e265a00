"""A memory-mapped gather reads each distinct row once, in file order, and hands back every requested copy in order.

Chains or starts vmapped over one shared minibatch reach the host as one callback holding every copy of it: the warm-up's
Adam search (9 starts on one minibatch a step) read each row 9 times, 17 of its 21 CPU s on a 10^7-row ``.npy``."""

import numpy as np

from minibatch_mcmc.data import open_npy


class Counting(np.ndarray):
    """An array whose ``take`` counts the rows it is asked for (``rows``: shared list)."""

    rows: list

    def take(self, indices, axis=None, out=None, mode="raise"):
        Counting.rows.append(np.size(indices))
        return np.asarray(self).take(indices, axis=axis, out=out if out is None else np.asarray(out), mode=mode)


def test_duplicated_unsorted_rows_are_read_once(tmp_path):
    """Rows ``idx`` (unsorted, each of 100 distinct rows repeated 9 times) come back as ``x[idx]`` exactly, while the map
    is asked for 100 rows per column, not 900. Catches a gather that reads copies again or returns them out of order."""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((5000, 3)).astype(np.float32), rng.integers(0, 2, 5000).astype(np.int32)
    np.save(tmp_path / "x.npy", x), np.save(tmp_path / "y.npy", y)
    reader = open_npy({"x": tmp_path / "x.npy", "y": tmp_path / "y.npy"}).reader
    distinct = rng.choice(5000, 100, replace=False)
    idx = np.tile(distinct, 9)
    rng.shuffle(idx)
    Counting.rows = []
    reader.columns = [np.asarray(a).view(Counting) for a in reader.columns]
    got = dict(zip([s.name for s in reader.specs], reader.gather(idx.astype(np.int64))))
    assert sum(Counting.rows) == 2 * 100, Counting.rows
    assert np.array_equal(got["['x']"], x[idx]) and np.array_equal(got["['y']"], y[idx])

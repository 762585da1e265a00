"""The out-of-core mode search keeps the file's mapped pages within the reader's drop threshold (Linux: the
mapping's own Rss in /proc/self/smaps); the same search with dropping off shows the test can fail."""

import sys

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.data import open_npy
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.optim.mode import find_mode

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")


def mapped_rss(path: str) -> int:
    """Resident bytes of this process's mappings of ``path``."""
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                total += int(head[1]) * 1024
    return total


@pytest.mark.slow
def test_adam_phase_drops_mapped_pages(tmp_path):
    """500 Adam steps of 1000 random rows from a 20 MB file: mapped Rss <= threshold (2 MiB) + two batches of
    pages; with the threshold at 1 TiB the same search leaves > 12 MB resident."""
    n, d = 500_000, 10
    rng = np.random.default_rng(0)
    x, y = str(tmp_path / "x.npy"), str(tmp_path / "y.npy")
    np.save(x, rng.standard_normal((n, d)).astype(np.float32))
    np.save(y, rng.integers(0, 2, n).astype(np.int32))
    bound = (2 << 20) + 2 * 1000 * 4096
    for threshold, check in ((2 << 20, lambda r: r <= bound), (1 << 40, lambda r: r > 12e6)):
        src = open_npy({"x": x, "y": y}, check_finite=False)
        src.reader.resident_bytes = threshold
        find_mode(logistic_regression(prior_scale=5.0), src, jnp.zeros(d), key=0, adam_steps=500, newton_steps=0)
        assert check(mapped_rss(x)), (threshold, mapped_rss(x))
        src.reader.release()

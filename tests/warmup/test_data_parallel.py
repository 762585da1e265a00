"""The data-parallel warm-up: ``warmup`` over a source whose rows are split between ``jax.distributed`` processes (CPU,
127.0.0.1), each reading only its rows, against one process reading the whole file.

What must equal one process's to float32 rounding of the sums: the lean pass at a given point (its log-likelihood,
gradient and Hessian sums, reduced per process and combined once; and its largest influence deviations, merged across
processes), and the Taylor proxy the warm-up builds at its centre. The centre itself is the mode search's: its
trust-region steps near the mode compare log-posterior gains below the float32 resolution of the subsample's sums, so
a rounding difference in a pass can end the search one surrogate step apart (measured at N = 4000: 4096 against 5120
subsample rows, the centres 0.06 Laplace s.d.s apart); both are converged, within half a Laplace s.d. of the mode
(the lean warm-up's documented stop, written as a number here), so within one s.d. of each other.
"""

import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from processes import logistic_abs_sums, run_workers, sum_bound

from minibatch_mcmc import warmup
from minibatch_mcmc.control_variates.influence import kept_rows, probe_points
from minibatch_mcmc.control_variates.taylor import taylor_proxy
from minibatch_mcmc.data import open_npy, open_parquet
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.warmup.lean_pass import chunk_pass, stream

WARM = textwrap.dedent(
    """
    import sys
    import jax
    pid, count, port, kind, path, out, full, here = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:9]
    sys.path[:0] = [here, here + "/../samplers"]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid)
    import jax.numpy as jnp, numpy as np
    from minibatch_mcmc import warmup
    from minibatch_mcmc.data import take
    from minibatch_mcmc.data.shards import open_npy_rows, open_parquet_rows
    from minibatch_mcmc.models import logistic_regression
    from test_data_parallel import SCATTERED, lean_pass
    data = open_npy_rows({"x": path + "/x.npy", "y": path + "/y.npy"}) if kind == "npy" else open_parquet_rows(path)
    res = lean_pass(data)
    res["rows"] = np.asarray(take(data, jnp.asarray(SCATTERED))["x"])
    if full == "1":
        w = warmup(logistic_regression(), data, np.zeros(3, np.float32), key=0)
        res.update(centre=np.asarray(w.centre), cov=w.covariance, grad=np.asarray(w.proxy.grad_sum),
                   hess=np.asarray(w.proxy.hess_sum), m=w.test.batch_size, kind=w.kind)
    np.savez(f"{out}-{pid}.npz", **res)
    """
)
CENTRE = np.array([0.3, -0.2, 0.1], np.float32)
SCATTERED = np.asarray([3999, 7, 2001, 1999, 2000, 7, 0], np.int32)
"""Rows of every process in no order, one repeated: what a minibatch read asks."""
STEPS = 0.05 * np.eye(3)
"""The lean pass's influence probes: ``CENTRE +- 3 * 0.05`` along each axis."""


def lean_pass(data) -> dict:
    """The lean warm-up's pass (``lean_pass.stream``) at ``CENTRE`` with probes ``STEPS``, bulk level 0: its sums and largest
    deviations."""
    model, c, n = logistic_regression(), jnp.asarray(CENTRE), data.n
    pts = probe_points(c, STEPS)
    sums, top = stream(
        chunk_pass(model, lambda x: x, 2),
        data.arrays(),
        n,
        min(16384, n),
        c,
        pts,
        np.zeros((pts.shape[0], 1)),
        kept_rows(n),
        1.0,
        jnp.stack([c, c]),
    )
    return {"v": sums["value"], "g": sums["grad"], "h": sums["hess"], "top_dev": top[0], "top_idx": top[1]}


def _files(tmp_path, n: int) -> dict:
    data, _ = make_logistic_data(jax.random.key(5), n, 3)
    data = {k: np.asarray(v) for k, v in data.items()}
    for k, v in data.items():
        np.save(tmp_path / f"{k}.npy", v)
    return data


def _run(tmp_path, kind: str, path, count: int, full: bool) -> dict:
    """Run the workers; check every process holds the same results; return process 0's."""
    run_workers(
        WARM,
        count,
        [kind, str(path), str(tmp_path / "out"), "1" if full else "0", str(Path(__file__).parent)],
        timeout=600,
    )
    outs = [dict(np.load(f"{tmp_path / 'out'}-{i}.npz")) for i in range(count)]
    for out in outs[1:]:
        for k in outs[0]:
            np.testing.assert_array_equal(out[k], outs[0][k])
    return outs[0]


def _compare_pass(got: dict, whole, data: dict, count: int) -> None:
    n = whole.n
    np.testing.assert_array_equal(got["rows"], data["x"][SCATTERED])  # bit for bit
    one = lean_pass(whole)
    s = logistic_abs_sums(data, CENTRE)
    for k in ("v", "g", "h"):
        np.testing.assert_array_less(np.abs(got[k] - one[k]), sum_bound(s[k], n, count))
    top = 20  # the largest deviations are per-row values: the same rows, to a few ulps
    np.testing.assert_array_equal(got["top_idx"][:top], one["top_idx"][:top])
    np.testing.assert_allclose(got["top_dev"][:top], one["top_dev"][:top], rtol=1e-5)
    assert got["top_idx"].size == one["top_idx"].size


def _compare_warmup(got: dict, whole, data: dict, count: int) -> None:
    n, model = whole.n, logistic_regression()
    single = warmup(model, whole, np.zeros(3, np.float32), key=0)
    at = taylor_proxy(model, whole, jnp.asarray(got["centre"]), order=2)  # the processes' proxy, built by one process
    s = logistic_abs_sums(data, got["centre"])
    np.testing.assert_array_less(np.abs(got["grad"] - np.asarray(at.grad_sum, np.float64)), sum_bound(s["g"], n, count))
    np.testing.assert_array_less(np.abs(got["hess"] - np.asarray(at.hess_sum, np.float64)), sum_bound(s["h"], n, count))
    d = got["centre"].astype(np.float64) - np.asarray(single.centre, np.float64)
    sds = float(np.sqrt(d @ np.linalg.solve(single.covariance, d)))
    assert sds <= 1.0, sds
    assert int(got["m"]) == single.test.batch_size and str(got["kind"]) == single.kind


def test_two_processes_pass_and_gather_as_one(tmp_path):
    """Smoke test of the warm-up's reads over two processes, each reading half of a 4000-row ``.npy`` pair: scattered
    rows (a minibatch: both halves, one row twice) come back bit for bit from their owners, and the lean pass at a
    fixed point (``lean_pass.stream``: each half reduced, combined once) gives one process's sums within the float32 bound
    ``sum_bound`` and the same 20 largest influence deviations. A process summing only its half misses the sums by
    about half; a merge keeping one process's deviations loses the other half's rows; a read of another process's
    row without the exchange fails the worker (the original code: "belongs to another process")."""
    data = _files(tmp_path, 4000)
    got = _run(tmp_path, "npy", tmp_path, 2, full=False)
    _compare_pass(got, open_npy({"x": tmp_path / "x.npy", "y": tmp_path / "y.npy"}), data, 2)


@pytest.mark.slow  # two subprocesses importing JAX and compiling the warm-up: ~60 s on the loaded 2-core machine
def test_two_processes_warm_up_as_one(tmp_path):
    """Two processes, each reading half of a 4000-row ``.npy`` pair, run ``warmup`` (every minibatch's rows from their
    owners, every pass reduced per process and combined once): the smoke test's checks, and the warm-up's Taylor proxy
    is one process's at its centre within ``sum_bound``; its centre lies within the mode search's tolerance of one
    process's (module docstring), and its batch size and proposal are one process's."""
    data = _files(tmp_path, 4000)
    got = _run(tmp_path, "npy", tmp_path, 2, full=True)
    whole = open_npy({"x": tmp_path / "x.npy", "y": tmp_path / "y.npy"})
    _compare_pass(got, whole, data, 2)
    _compare_warmup(got, whole, data, 2)


@pytest.mark.slow  # four subprocesses on two cores: ~100 s
def test_four_processes_warm_up_over_parquet_row_groups_as_one(tmp_path):
    """Four processes over a Parquet file of 16 row groups (each decoding only its 4) run ``warmup``: the same
    comparisons with one process over the whole file as the two-process test."""
    data = _files(tmp_path, 4000)
    table = pa.table(
        {"x": pa.FixedSizeListArray.from_arrays(pa.array(data["x"].reshape(-1)), 3), "y": pa.array(data["y"])}
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=250)
    got = _run(tmp_path, "parquet", tmp_path / "t.parquet", 4, full=True)
    whole = open_parquet(tmp_path / "t.parquet")
    _compare_pass(got, whole, data, 4)
    _compare_warmup(got, whole, data, 4)

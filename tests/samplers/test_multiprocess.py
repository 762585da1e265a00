"""Several JAX processes on this machine (CPU, ``jax.distributed`` on 127.0.0.1): one sharded ``sample`` across two, and
the full-data passes of a row-partitioned source (each process reading only its rows) against one process's."""

import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from draws_tolerance import mismatches
from processes import free_port, logistic_abs_sums, run_commands, run_workers, sum_bound

from minibatch_mcmc import mh_minibatch, random_walk, sample
from minibatch_mcmc.control_variates.taylor import TaylorProxy, taylor_proxy
from minibatch_mcmc.data import open_npy, open_parquet
from minibatch_mcmc.data.passes import full_data_sum
from minibatch_mcmc.models import gaussian_mixture, logistic_regression, make_logistic_data, make_mixture_data

WORKER = textwrap.dedent(
    """
    import sys
    import jax
    pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    assert len(jax.devices()) == 2 and len(jax.local_devices()) == 1, jax.devices()
    import jax.numpy as jnp, numpy as np
    from minibatch_mcmc import mh_minibatch, random_walk, sample
    from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
    r = sample(gaussian_mixture(), make_mixture_data(jax.random.key(1), 2000), jnp.zeros(2), proposal=random_walk(scale=0.15),
               test=mh_minibatch(50), num_samples=40, key=3, num_chains=4, temperature=20.0, block_size=20, progress=False,
               devices="all")
    np.save(out, np.asarray(r.positions))
    """
)


@pytest.mark.slow  # two subprocesses importing JAX and compiling: ~35 s on a loaded machine
def test_two_processes_draw_what_one_process_draws(tmp_path):
    port = free_port()
    got = run_commands(
        [[sys.executable, "-c", WORKER, str(i), str(port), str(tmp_path / f"p{i}.npy")] for i in range(2)], timeout=180
    )
    assert all(code == 0 for code, _, _ in got), "\n".join(err[-1500:] for _, _, err in got)
    single = sample(
        gaussian_mixture(),
        make_mixture_data(jax.random.key(1), 2000),
        jnp.zeros(2),
        proposal=random_walk(scale=0.15),
        test=mh_minibatch(50),
        num_samples=40,
        key=3,
        num_chains=4,
        temperature=20.0,
        block_size=20,
        progress=False,
    )
    for i in range(2):  # positions to float32 rounding: the two programs are compiled apart (draws_tolerance)
        assert not (
            bad := mismatches({"pos": np.load(tmp_path / f"p{i}.npy")}, {"pos": np.asarray(single.positions)}, 40, 2000)
        ), bad


PASSES = textwrap.dedent(
    """
    import sys
    import jax
    pid, count, port, kind, path, out, traced = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:8]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid)
    import jax.numpy as jnp, numpy as np
    from minibatch_mcmc.control_variates.taylor import taylor_proxy
    from minibatch_mcmc.data.passes import full_data_max_abs, full_data_sum
    from minibatch_mcmc.data.shards import open_npy_rows, open_parquet_rows
    from minibatch_mcmc.models import logistic_regression
    model, centre, chunk = logistic_regression(), jnp.asarray([0.3, -0.2, 0.1]), int(path.split(",")[1])
    path = path.split(",")[0]
    data = open_npy_rows({"x": path + "/x.npy", "y": path + "/y.npy"}) if kind == "npy" else open_parquet_rows(path)
    proxy = taylor_proxy(model, data, centre, order=2, chunk=chunk)
    res = {"grad": proxy.grad_sum, "hess": proxy.hess_sum}
    if traced == "1":
        from minibatch_mcmc.optim.mode import full_pass_fns
        _, derivatives = full_pass_fns(model, lambda x: x, 1.0, data.n, chunk, True)
        res["v"], res["g"], res["h"] = derivatives(centre, data)
        res["lik"] = full_data_sum(lambda rows: model.log_lik(centre, rows), data, data.n, chunk)[0]
        top = float(np.load(path + ".top.npy"))  # the largest x[:, 0]: one row, in one process, gives 1 / 0
        res["flag"] = full_data_sum(lambda rows: 1.0 / (rows["x"][:, 0] - top), data, data.n, chunk)[1]
        res["max"] = full_data_max_abs(lambda rows: rows["x"][:, 0], data, data.n, chunk)[0]
        res["decoded"] = getattr(data.reader.inner, "decoded_groups", -1)
        from minibatch_mcmc.data import open_parquet_files
        files = open_parquet_files(path)  # whole files per process, only their footers opened
        by_files = taylor_proxy(model, files, centre, order=2, chunk=chunk)
        res["files_grad"], res["files_hess"] = by_files.grad_sum, by_files.hess_sum
        res["files_decoded"] = files.reader.inner.decoded_groups
    np.savez(f"{out}-{pid}.npz", **{k: np.asarray(v) for k, v in res.items()})
    """
)

CENTRE = np.array([0.3, -0.2, 0.1], np.float32)


def _logistic_files(tmp_path, n: int) -> dict:
    data, _ = make_logistic_data(jax.random.key(5), n, 3)
    data = {k: np.asarray(v) for k, v in data.items()}
    for k, v in data.items():
        np.save(tmp_path / f"{k}.npy", v)
    return data


def _check_proxy(out: dict, single: TaylorProxy, s: dict, chunk: int, count: int) -> None:
    np.testing.assert_array_less(
        np.abs(out["grad"] - np.asarray(single.grad_sum, np.float64)), sum_bound(s["g"], chunk, count)
    )
    np.testing.assert_array_less(
        np.abs(out["hess"] - np.asarray(single.hess_sum, np.float64)), sum_bound(s["h"], chunk, count)
    )


def test_two_processes_build_the_taylor_proxy_of_one(tmp_path):
    """Two processes, each reading half the rows of a 4000-row ``.npy`` pair, build the second-order Taylor proxy (its
    float64 gradient and Hessian sums, one cross-process reduction): each process's sums equal the proxy one process
    builds from the whole file within the float32 rounding bound ``_bound`` (about 1e-4 of the summed magnitudes),
    and both processes hold the same proxy. A process summing only its own half (no reduction), or every row twice,
    misses by about half the sum; on a source without partition support the worker fails to import."""
    n, chunk = 4000, 500
    data = _logistic_files(tmp_path, n)
    run_workers(PASSES, 2, ["npy", f"{tmp_path},{chunk}", str(tmp_path / "out"), "0"], timeout=120)
    outs = [dict(np.load(f"{tmp_path / 'out'}-{i}.npz")) for i in range(2)]
    for k in outs[0]:
        np.testing.assert_array_equal(outs[0][k], outs[1][k])
    single = taylor_proxy(
        logistic_regression(),
        open_npy({"x": tmp_path / "x.npy", "y": tmp_path / "y.npy"}),
        jnp.asarray(CENTRE),
        order=2,
        chunk=chunk,
    )
    _check_proxy(outs[0], single, logistic_abs_sums(data, CENTRE), chunk, 2)


@pytest.mark.slow  # four subprocesses importing JAX and compiling three passes: ~60 s on a loaded 2-core machine
def test_four_processes_pass_over_parquet_row_groups_as_one(tmp_path):
    """Four processes over 8 Parquet files of 2 row groups each (each process decoding only its 4 groups, counted by
    the reader; split by row groups, and by whole files with ``open_parquet_files``) build the Taylor proxy (host float64 sums) and run the mode search's Newton pass and a full-data
    log-likelihood sum (jitted float32 passes whose reduction is an ``io_callback`` all-gather): all equal one
    process's over the whole file within the float32 rounding bound ``_bound``, and all processes agree exactly. The
    one non-finite term (in one process's rows) is reported by every process, and the full-data max is the file's."""
    n, chunk, count = 4000, 250, 4
    data = _logistic_files(tmp_path, n)
    table = pa.table(
        {"x": pa.FixedSizeListArray.from_arrays(pa.array(data["x"].reshape(-1)), 3), "y": pa.array(data["y"])}
    )
    (tmp_path / "t").mkdir()
    for k in range(8):  # 8 files of 2 row groups each
        pq.write_table(table.slice(500 * k, 500), tmp_path / "t" / f"part-{k}.parquet", row_group_size=250)
    np.save(tmp_path / "t.top.npy", data["x"][:, 0].max())
    run_workers(PASSES, count, ["parquet", f"{tmp_path / 't'},{chunk}", str(tmp_path / "out"), "1"], timeout=300)
    outs = [dict(np.load(f"{tmp_path / 'out'}-{i}.npz")) for i in range(count)]
    for out in outs[1:]:
        for k in ("grad", "hess", "v", "g", "h", "lik", "flag", "max", "files_grad", "files_hess"):
            np.testing.assert_array_equal(out[k], outs[0][k])
    assert [int(o["decoded"]) for o in outs] == [int(o["files_decoded"]) for o in outs] == [4] * count
    assert bool(outs[0]["flag"]) and float(outs[0]["max"]) == np.abs(data["x"][:, 0]).max()  # a max is exact
    model, c, whole = logistic_regression(), jnp.asarray(CENTRE), open_parquet(tmp_path / "t")
    s, single = logistic_abs_sums(data, CENTRE), taylor_proxy(model, whole, c, order=2, chunk=chunk)
    _check_proxy(outs[0], single, s, chunk, count)
    _check_proxy({"grad": outs[0]["files_grad"], "hess": outs[0]["files_hess"]}, single, s, chunk, count)
    from minibatch_mcmc.optim.mode import full_pass_fns

    v, g, h = full_pass_fns(model, lambda x: x, 1.0, n, chunk, True)[1](c, whole)
    lik = full_data_sum(lambda rows: model.log_lik(c, rows), whole, n, chunk)[0]
    terms = chunk + n // chunk + count
    for got, want, mag in (
        (outs[0]["v"], v, s["v"]),
        (outs[0]["g"], g, s["g"]),
        (outs[0]["h"], h, s["h"]),
        (outs[0]["lik"], lik, s["v"]),
    ):
        np.testing.assert_array_less(np.abs(got - np.asarray(want, np.float64)), sum_bound(mag, terms, count))

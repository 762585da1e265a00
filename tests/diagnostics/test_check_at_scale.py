"""The post-sampling check and the influence search at large ``N`` (issue 29, point 4): the check reads at most
``CHECK_ROWS`` rows whatever ``N`` (its sampled log ratios within their stated Monte Carlo error of the full ones), float32
rounding of a proxy that is otherwise exact is neither a stratum nor a warning, and the advice of the normality warning
depends on whether the stratum is on."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.control_variates import taylor_proxy
from minibatch_mcmc.control_variates.influence import influential_rows
from minibatch_mcmc.data.generate import logistic_chunks
from minibatch_mcmc.data.host import HostData, LeafSpec
from minibatch_mcmc.diagnostics import check_rows, proxy_check
from minibatch_mcmc.diagnostics.proxy_check import ProxyCheck, check_proxy, warn_check
from minibatch_mcmc.models import logistic_regression

BIG_N = 5e7
"""The size emulated: at temperature ``K = n / BIG_N`` the ``n`` rows' tempered posterior has the scale of ``BIG_N`` rows,
and a row's residual counts ``1 / K`` times, as a blind window of ``BIG_N / m`` rows would."""


def logistic_rows(n: int, d: int = 10, seed: int = 0) -> tuple[dict, np.ndarray, np.ndarray]:
    """``n`` rows of ``data.generate``'s logistic regression, its maximum-likelihood point and the Hessian there (float64)."""
    _, chunks = logistic_chunks(n, d, seed, n)
    x, y = next(chunks)
    t, xd = np.zeros(d), x.astype(np.float64)
    for _ in range(25):
        p = 1 / (1 + np.exp(-xd @ t))
        h = -(xd * (p * (1 - p))[:, None]).T @ xd
        t = t - np.linalg.solve(h, xd.T @ (y - p))
    return {"x": jnp.asarray(x), "y": jnp.asarray(y)}, t, h


class CountingReader:
    """An in-memory ``HostReader`` that counts the rows read from it."""

    def __init__(self, tree: dict):
        leaves, self.treedef = jax.tree_util.tree_flatten(tree)
        self.columns = [np.asarray(a) for a in leaves]
        self.specs = tuple(LeafSpec(str(i), a.shape[1:], a.dtype) for i, a in enumerate(self.columns))
        self.n, self.rows, self.validated = int(self.columns[0].shape[0]), 0, True

    def gather(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx``, counted."""
        self.rows += int(idx.size)
        return [a[idx] for a in self.columns]

    def read_range(self, start: int, stop: int) -> list[np.ndarray]:
        """Rows ``[start, stop)``, counted."""
        self.rows += stop - start
        return [a[start:stop] for a in self.columns]


def laplace_draws(mode: np.ndarray, cov: np.ndarray, count: int, seed: int) -> jax.Array:
    """``(1, 2 * count, d)`` Laplace draws (the check reads the second half)."""
    z = np.random.default_rng(seed).standard_normal((2 * count, mode.size))
    return jnp.asarray((mode + z @ np.linalg.cholesky(cov).T)[None], jnp.float32)


def test_check_reads_the_same_rows_at_twice_the_size():
    """Past ``CHECK_ROWS`` (lowered to 4096 here, so the sizes stay small) the check reads that many rows of an out-of-core
    source whether it holds 3x or 6x as many: its cost does not grow with ``N``. Before, it read every row (12,288 and 24,576)."""
    read = {}
    for n in (12_288, 24_576):
        tree, mode, h = logistic_rows(n)
        reader = CountingReader(tree)
        model = logistic_regression()
        proxy = taylor_proxy(model, tree, jnp.asarray(mode, jnp.float32))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(check_rows, "CHECK_ROWS", 4096, raising=False)
            reader.rows = 0
            out = check_proxy(
                model,
                HostData(reader),
                proxy,
                proxy.centre,
                laplace_draws(mode, np.linalg.inv(-h), 10, 0),
                num_draws=10,
                warn=False,
            )
        read[n] = (reader.rows, out)
    assert read[12_288][0] == read[24_576][0] <= 4096 + check_rows.CHECK_CHUNK, read
    assert all(out.rows_read == 4096 and out.data_used == 10 * 4096 for _, out in read.values()), read


def test_sampled_log_ratios_within_their_stated_error():
    """On 20,000 rows at the posterior scale of 2,000 (draws of the Laplace fit widened 3x, so the log ratios vary), the
    log ratios from a 4096-row sample differ from those of every row by less than 4 of the Monte Carlo s.d.s the check
    states (a mean of 100 draws' errors: catches a wrong scale of the sampled sums, or an error stated too small)."""
    tree, mode, h = logistic_rows(20_000)
    model, k = logistic_regression(), 0.1
    proxy = taylor_proxy(model, tree, jnp.asarray(mode, jnp.float32))
    draws = laplace_draws(mode, 9 * k * np.linalg.inv(-h), 100, 1)
    full = check_rows.streamed_sums(model, proxy, proxy.centre, tree, 20_000, *proxy_check.thinned_moves(draws, 100))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check_rows, "CHECK_ROWS", 4096)
        part = check_rows.streamed_sums(
            model, proxy, proxy.centre, tree, 20_000, *proxy_check.thinned_moves(draws, 100), jax.random.key(3)
        )
    sd = check_rows.sample_sd(part[0], 20_000, part[2])
    assert part[2] == 4096 and full[2] == 20_000 and np.all(sd > 0)
    z = (part[0][:, 0] - full[0][:, 0]) / sd
    assert np.sqrt(np.mean(z * z)) < 4, z


@pytest.fixture(scope="module")
def exact_up_to_rounding():
    """A logistic regression of 20,000 rows at temperature ``20,000 / BIG_N``: its proxy's residuals at the posterior
    scale are ~1e-9 nats a row, its float32 rounding ~1e-7, which the temperature weighs as ``BIG_N`` rows would."""
    tree, mode, h = logistic_rows(20_000)
    k = 20_000 / BIG_N
    model = logistic_regression()
    proxy = taylor_proxy(model, tree, jnp.asarray(mode, jnp.float32))
    return model, tree, proxy, mode, k * np.linalg.inv(-h), k


def test_rounding_builds_no_stratum(exact_up_to_rounding):
    """The influence search finds no row in a proxy exact up to float32 rounding, and does not warn. Before, the
    deviations of rounding (a few 1e-7 nats a row, over a blind window of 10^6 emulated rows) filled the 1000-row stratum
    and warned that the proxy does not pay off."""
    model, tree, proxy, _, cov, k = exact_up_to_rounding
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = influential_rows(model, tree, proxy, np.linalg.cholesky(cov), key=jax.random.key(0), temperature=k)
    assert found.rows.size == 0 and found.blind_error <= 0.1, found


def test_rounding_does_not_warn_the_check(exact_up_to_rounding):
    """The check on Laplace draws of the same model, with a 50-row minibatch recorded, stays quiet."""
    model, tree, proxy, mode, cov, k = exact_up_to_rounding
    draws = laplace_draws(mode, cov, 100, 2)
    records = {"batch_size": np.full(draws.shape[:2], 50), "residual_sd": np.full(draws.shape[:2], 1e-7)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = check_proxy(model, tree, proxy, proxy.centre, draws, temperature=k, records=records)
    assert out.ok, out


def test_advice_depends_on_the_stratum():
    """Rows the minibatches missed (exact residual s.d. 40x the recorded one): with the stratum off the warning advises
    it; with it on, it says so and advises what is left (before, it advised enabling the stratum that was on)."""
    base = ProxyCheck(
        k_hat=0.0,
        threshold=0.5,
        num_draws=100,
        log_ratio_sd=0.0,
        log_ratio_range=0.0,
        data_used=0,
        seconds=0.0,
        batch_size=50,
        acceptance_error=0.3,
        sd_ratio=40.0,
    )
    with pytest.warns(UserWarning, match=r"Enable the exact stratum \(auto_sample\(stratum=True\)\)"):
        warn_check(base._replace(stratum=False))
    with pytest.warns(UserWarning) as caught:
        warn_check(base._replace(stratum=True, stratum_rows=5))
    message = str(caught[0].message)
    assert "Enable the exact stratum" not in message and "exact stratum (on, 5 rows)" in message, message


def test_progress_shows_the_check_and_its_cost(capsys):
    """With ``progress`` the check prints a status line when it starts, ending with its cost (rows, seconds)."""
    tree, mode, h = logistic_rows(2_000, d=2)
    model = logistic_regression()
    proxy = taylor_proxy(model, tree, jnp.asarray(mode, jnp.float32))
    out, cost = proxy_check.timed_check(
        model,
        tree,
        proxy,
        proxy.centre,
        laplace_draws(mode, np.linalg.inv(-h), 10, 0),
        num_draws=10,
        warn=False,
        progress=True,
    )
    err = capsys.readouterr().err
    assert "after sampling: check" in err and "1.00 passes (2,000 rows)" in err, err
    assert cost.data == out.rows_read == 2_000 and cost.seconds >= out.seconds, (cost, out)


def test_bulk_rows_of_a_tall_source_need_no_permutation_of_n(monkeypatch):
    """Past ``ONE_OFF_WORK`` rows the influence probes' bulk rows are drawn without a permutation of all ``N`` (at 5e7 rows
    that permutation took the process's peak resident memory from 0.4 to 3.0 GB): 2048 distinct sorted rows in range, the
    same for the same key. Before, ``probe_plan`` permuted every row whatever ``N``."""
    from minibatch_mcmc.control_variates import influence

    def refuse(key, n):
        raise AssertionError(f"a permutation of all {n} rows")

    monkeypatch.setattr(influence, "permuted_rows", refuse)
    n = 50_000_000
    _, rows = influence.probe_plan(np.eye(3), jax.random.key(4), n, 2048)
    again = influence.probe_plan(np.eye(3), jax.random.key(4), n, 2048)[1]
    assert rows.size == 2048 and np.all(np.diff(rows) > 0) and 0 <= rows[0] and rows[-1] < n, rows
    assert np.array_equal(rows, again) and rows[-1] - rows[0] > n // 2  # spread over the rows, not a block

"""A check after sampling that the proxy-based run can fail: Pareto k-hat of full-data / proxy importance ratios.

A minibatch test with a control variate trusts the proxy wherever its minibatch shows no residual.
On a thinned set of draws the check computes, with one streamed pass each, the log ratio of the
full-data log posterior to the proxy's, ``log w(theta) = sum_{i in R} e_i(c, theta) / K`` (``e_i`` the
proxy's residual from its centre ``c``; ``R`` the rows the minibatch is drawn from, so rows of an exact
stratum are part of the proxy and drop out). Where the proxy is right these ratios are nearly constant;
where the chain may have sampled the proxy instead of the posterior their upper tail is heavy. PSIS's
Pareto ``k-hat`` (ArviZ ``psislw``) measures that tail; the check warns above Vehtari et al.'s
sample-size threshold ``min(1 - 1 / log10(S), 0.7)`` for ``S`` draws.

Pareto-k alone misses a proxy that is wrong on a few rows at every draw (five Cauchy rows: k-hat 0.35, the
ratios' tail not heavy). So the same pass also takes, at every checked draw ``theta`` and the chain's next
distinct draw ``theta'``, the power sums of the test's residuals ``e_i(theta, theta')`` over ``R``; from their
exact moments ``normality.minibatch_shape`` measures how far the ``m``-row minibatch mean the run used is from
the normal its test assumes (Edgeworth terms, capped by the most the estimate's exact s.d. can move an acceptance
probability), for the acceptance rule of the run's test (``rule``: MHminibatch's Barker rule, or the penalty test's
Metropolis rule, whose variance estimate also has to be chi-square-like). The check warns when
the mean of that acceptance-probability error over the checked moves exceeds ``ACCEPTANCE_ERROR_MAX``,
with the ratio of the exact residual s.d. to the median ``residual_sd`` the run recorded.

Cost independent of ``N``: past ``check_rows.CHECK_ROWS`` rows the sums are taken over a uniform sample of them, with
the Monte Carlo error the warning states (``check_rows``).

``timed_check`` given the run's proposal and test (``auto_sample`` gives them) also runs ``posterior_error``'s coupled
exact continuation, which estimates each posterior mean's and s.d.'s error: it alone then warns and decides ``ok``, and
the figures above are information (a per-step error does not say whether the posterior moved).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.control_variates.importance import ImportanceProxy
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.diagnostics.check_rows import sample_sd, streamed_sums
from minibatch_mcmc.diagnostics.normality import minibatch_shape
from minibatch_mcmc.diagnostics.posterior_error import PosteriorError, check_posterior
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.phase_cost import PhaseClock, PhaseCost

PyTree = Any

EQUAL_WEIGHTS = 0.05
"""Spread (max - min) of the log ratios, in nats, up to which the weights count as equal: every weight is then
within 5% of every other, no reweighting can move an estimate by more, and k-hat (of what is then rounding
noise) is reported as -inf."""
WEIGHTS_MATTER = 0.05
"""Standard deviation of ``log w`` (nats) up to which the Pareto part does not warn. Reweighting the draws by ``w``
moves a posterior mean by ``Cov(f, log w)`` to first order, at most ``sd(f) sd(log w)`` (Cauchy-Schwarz): below 0.05
the proxy and the full-data posterior differ by less than 5% of an s.d. wherever the chains went, the resolution the
issue asks of the sampler, and k-hat of such nearly equal weights is the shape of noise (a short, well-behaved logistic
run gave k-hat 1.38 on log ratios within 0.35 nats)."""
ACCEPTANCE_ERROR_MAX = 0.02
"""Mean error of the acceptance probability (``normality.minibatch_shape``) over the checked moves above which the
check warns: 0.02 per step. Measured on ``auto_sample`` runs at N = 100,000 (``benchmarks/proxy_check_normality.py``):
0.8 with five Cauchy rows left to the minibatch, 3.4e-4 with them exact, 3.2e-3 on a logistic regression (d = 10)."""
MISSED_ROWS = 1.5
"""Exact residual s.d. over the run's recorded one above which the warning blames rows the minibatches missed (and
advises the exact stratum) rather than residuals that are non-normal however they are sampled."""


class ProxyCheck(NamedTuple):
    """What the check measured."""

    k_hat: float
    """Pareto k-hat of the importance ratios (``-inf`` when they are all equal)."""
    threshold: float
    """Above it the check warns: ``min(1 - 1 / log10(S), 0.7)``."""
    num_draws: int
    """Draws checked (``S``)."""
    log_ratio_sd: float
    """Standard deviation of ``log w`` over the checked draws (nats)."""
    log_ratio_range: float
    """``max - min`` of ``log w`` over the checked draws (nats)."""
    data_used: int
    """Row evaluations: every row read at every checked draw (all draws in one streamed pass)."""
    seconds: float
    """Wall time of the check."""
    rows_read: int = 0
    """Rows of ``R`` read: all of them up to ``CHECK_ROWS``, else a uniform sample of ``CHECK_ROWS``."""
    log_ratio_mc_sd: float = 0.0
    """Median over the draws of the Monte Carlo s.d. of ``log w`` from the sample (0 when every row was read)."""
    population: int = 0
    """``|R|``: the rows the minibatches are drawn from (the check read ``rows_read`` of them)."""
    stratum: bool = False
    """Whether the run searched for an exact stratum (the warning's advice depends on it)."""
    stratum_rows: int = 0
    """Rows in the run's exact stratum."""
    batch_size: int = 0
    """``m``: the median minibatch the run's test read (0: not given, no normality check)."""
    acceptance_error: float = 0.0
    """Mean over the checked moves of the acceptance-probability error of the ``m``-row normal approximation."""
    acceptance_error_max: float = ACCEPTANCE_ERROR_MAX
    """Above it the check warns."""
    edgeworth_error: float = 0.0
    """Median over the moves of the Edgeworth sup-CDF error of the ``m``-row mean."""
    skewness: float = 0.0
    """Median over the moves of ``|g1| / sqrt(m)``, the ``m``-row mean's skewness."""
    excess_kurtosis: float = 0.0
    """Median over the moves of ``g2 / m``, the ``m``-row mean's excess kurtosis."""
    sd_ratio: float = float("nan")
    """Median exact residual s.d. over the moves / the median ``residual_sd`` the run recorded (nan: not recorded)."""
    posterior: PosteriorError | None = None
    """The coupled exact continuation's estimate of each mean's and s.d.'s error (``posterior_error``), when the check
    had the run's proposal and test; it alone decides ``ok`` and warns, the figures above are then information."""

    @property
    def pareto_ok(self) -> bool:
        """Whether ``k_hat`` is at most the threshold (``-inf`` when the weights are equal to ``EQUAL_WEIGHTS``), or the
        weights too close to equal to move any mean by 5% of an s.d. (``WEIGHTS_MATTER``)."""
        return bool(self.k_hat <= self.threshold or self.log_ratio_sd <= WEIGHTS_MATTER)

    @property
    def normal_ok(self) -> bool:
        """Whether ``acceptance_error`` is at most ``acceptance_error_max``."""
        return bool(self.acceptance_error <= self.acceptance_error_max)

    @property
    def ok(self) -> bool:
        """No mean or s.d. off by more than its tolerance (``posterior``); without it, both per-step checks pass."""
        return self.posterior.ok if self.posterior is not None else self.pareto_ok and self.normal_ok


def pareto_threshold(num_draws: int) -> float:
    """``min(1 - 1 / log10(S), 0.7)``: the largest k-hat at which ``S`` importance draws are still reliable."""
    return min(1.0 - 1.0 / math.log10(num_draws), 0.7)


def thinned_moves(positions: PyTree, num_draws: int) -> tuple[PyTree, PyTree]:
    """``num_draws`` draws evenly spaced over the second half of every chain (leading axes: chains, samples), and
    for each the chain's next draw that differs from it (else its last earlier one; itself in a chain that never moved)."""
    leaves = jax.tree_util.tree_leaves(positions)
    chains, samples = leaves[0].shape[:2]
    late = [(c, s) for c in range(chains) for s in range(samples // 2, samples)]
    pick = np.unique(np.linspace(0, len(late) - 1, min(num_draws, len(late))).round().astype(int))
    ci, si = np.asarray([late[p][0] for p in pick]), np.asarray([late[p][1] for p in pick])
    flat = np.concatenate([np.asarray(a).reshape(chains, samples, -1) for a in leaves], axis=-1)
    moved = np.any(flat[:, 1:] != flat[:, :-1], axis=-1)  # moved[c, t]: draw t + 1 differs from draw t
    nxt = np.empty_like(si)
    for j, (c, s) in enumerate(zip(ci, si)):
        later = np.flatnonzero(moved[c, s:])
        earlier = np.flatnonzero(moved[c, :s])
        nxt[j] = s + later[0] + 1 if later.size else (earlier[-1] if earlier.size else s)
    at = jax.tree_util.tree_map(lambda a: np.asarray(a)[ci, si], positions)
    return at, jax.tree_util.tree_map(lambda a: np.asarray(a)[ci, nxt], positions)


def pareto_k(log_weights: np.ndarray) -> float:
    """ArviZ's PSIS k-hat of ``log_weights`` (independent draws), ``-inf`` if they are equal to ``EQUAL_WEIGHTS``."""
    lw = np.asarray(log_weights, np.float64)
    if np.ptp(lw) <= EQUAL_WEIGHTS:
        return float("-inf")
    import arviz as az  # on first use: importing the package stays light

    _, k = az.psislw(lw - lw.max(), reff=1.0)
    return float(k)


def median_record(records: dict | None, name: str) -> float:
    """The median of a run's per-step record ``name`` (nan when not recorded)."""
    if records is None or name not in records:
        return float("nan")
    return float(np.median(np.asarray(records[name], np.float64)))


def spread_ratio(exact: float, recorded: float) -> float:
    """``exact / recorded`` residual s.d.s: nan where not recorded, and where the run recorded none (0) inf if the exact
    residuals spread, 1 if they do not either (a minibatch of rows the proxy fits exactly)."""
    if recorded != 0.0:
        return exact / recorded
    return float("inf") if exact > 0.0 else 1.0


def distinct_rows(estimator: Estimator, n_data: int) -> int:
    """The distinct rows a minibatch draws from: ``N`` less the exact stratum (an importance-sampled population
    repeats its rows, so its size ``M`` is not that count: its inner estimator's population is)."""
    base = estimator.inner if isinstance(estimator, ImportanceProxy) else estimator
    return base.population_size(n_data)


def check_proxy(
    model: Model,
    data: Any,
    estimator: Estimator,
    centre: PyTree,
    positions: PyTree,
    *,
    num_draws: int = 100,
    temperature: float = 1.0,
    records: dict | None = None,
    rule: str = "barker",
    warn: bool = True,
    key: jax.Array | int = 0,
    stratum: bool | None = None,
) -> ProxyCheck:
    """Pareto k-hat of ``p(theta | all data) / proxy posterior`` on ``num_draws`` thinned draws, and the normality
    of the run's minibatch at each of them (module docstring).

    ``estimator`` is the control variate the run used (a ``TaylorProxy`` or a ``StratifiedProxy``) and
    ``centre`` its expansion point; ``positions`` the run's draws (leading axes: chains, samples); ``records``
    the run's per-step records (``SampleResult.records``), whose median ``batch_size`` is the ``m`` checked
    (without them, or when ``m`` covers every row, only the Pareto check runs); ``rule`` the acceptance rule of the
    run's test (``"barker"``: MHminibatch; ``"metropolis"``: the penalty test); ``key`` draws the rows read past
    ``CHECK_ROWS``; ``stratum`` whether the run searched for an exact stratum (None: whether ``estimator`` has one).
    Warns with the measured values.
    """
    num_draws = check_int(num_draws, "num_draws", 5, why="Pareto smoothing needs a tail of several draws")
    t0 = time.perf_counter()
    source = as_data_source(data)
    n_pop = estimator.population_size(source.n)
    population = estimator.population(source.arrays())
    at, moved = thinned_moves(positions, num_draws)
    count = int(jax.tree_util.tree_leaves(at)[0].shape[0])
    total, bad, read = streamed_sums(model, estimator, centre, population, n_pop, at, moved, as_key(key))
    if np.any(bad):
        raise ValueError(f"the full-data log likelihood is not finite at {int(np.sum(bad))} of {count} checked draws")
    lw = total[:, 0] / temperature
    k_hat = pareto_k(lw)
    out = ProxyCheck(
        k_hat,
        pareto_threshold(count),
        count,
        float(np.std(lw)),
        float(np.ptp(lw)),
        count * read,
        0.0,
        rows_read=read,
        log_ratio_mc_sd=float(np.median(sample_sd(total, n_pop, read))) / temperature,
        population=n_pop,
        stratum=bool(distinct_rows(estimator, source.n) < source.n if stratum is None else stratum),
        stratum_rows=source.n - distinct_rows(estimator, source.n),
    )
    m = median_record(records, "batch_size")
    if np.isfinite(m) and round(m) < n_pop:
        shape = minibatch_shape(total[:, 1:5], n_pop, int(round(m)), temperature, rule)
        out = out._replace(
            batch_size=int(round(m)),
            acceptance_error=float(np.mean(shape.acceptance_error)),
            edgeworth_error=float(np.median(shape.edgeworth_error)),
            skewness=float(np.median(np.abs(shape.skewness))),
            excess_kurtosis=float(np.median(shape.excess_kurtosis)),
            sd_ratio=spread_ratio(float(np.median(shape.residual_sd)), median_record(records, "residual_sd")),
        )
    out = out._replace(seconds=time.perf_counter() - t0)
    if warn:
        warn_check(out)
    return out


def timed_check(
    model: Model,
    data: Any,
    estimator: Estimator,
    centre: PyTree,
    positions: PyTree,
    *,
    progress: bool = False,
    proposal: Proposal | None = None,
    test: AcceptanceTest | None = None,
    run_key: jax.Array | int | None = None,
    **options: Any,
) -> tuple[ProxyCheck, PhaseCost]:
    """``check_proxy`` with its cost (the ``check`` phase: rows read, seconds), and with ``progress`` a status line when it
    starts and its cost when it ends. Given the run's ``proposal``, ``test``, ``run_key`` (``sample``'s key) and
    ``records``, the per-step figures are information and the coupled exact continuation on the run's own draws and keys
    (``posterior_error.check_posterior``, from ``num_draws`` starts) is the check that warns, where it can run."""
    n = as_data_source(data).n
    coupled = proposal is not None and test is not None
    with PhaseClock("check", n, progress, stage="after sampling") as clock:
        out = check_proxy(
            model, data, estimator, centre, positions, **{**options, "warn": options.get("warn", True) and not coupled}
        )
        post = None
        if coupled:
            post = check_posterior(
                model,
                data,
                proposal,
                test,
                estimator,
                positions,
                run_key=run_key,
                records=options.get("records"),
                starts=options.get("num_draws", 100),
                temperature=options.get("temperature", 1.0),
                warn=options.get("warn", True),
                stratum=options.get("stratum"),
                centre=centre,
            )
            if post is None and options.get("warn", True):  # it cannot run here: the per-step figures warn as before
                warn_check(out)
        out = out._replace(posterior=post, seconds=out.seconds + (0.0 if post is None else post.seconds))
    return out, clock.cost(out.rows_read + (0 if post is None else post.data_used))


def sampled(out: ProxyCheck) -> str:
    """``" (from a uniform sample of M rows: Monte Carlo s.d. X nats per log ratio)"``, or nothing when every row was read."""
    if out.rows_read >= out.population:
        return ""
    return f", from a uniform sample of {out.rows_read:,} rows: Monte Carlo s.d. {out.log_ratio_mc_sd:.3g} nats per log ratio"


def warn_check(out: ProxyCheck) -> None:
    """Warn for each part of the check that failed, with what it measured and what to do."""
    if not out.pareto_ok:
        warnings.warn(
            f"the draws may follow the Taylor proxy rather than the posterior: Pareto k-hat of the full-data / proxy "
            f"importance ratios is {out.k_hat:.2f} > {out.threshold:.2f} on {out.num_draws} draws (log-ratio s.d. "
            f"{out.log_ratio_sd:.3g} nats{sampled(out)}), so the proxy is wrong where the chains went and the minibatch test may not "
            "have seen it; check with an exact test (BarkerTest, MetropolisTest) or look for rows the proxy cannot see",
            stacklevel=3,
        )
    if not out.normal_ok:
        warnings.warn(
            f"the minibatch test's normal approximation is off: at {out.num_draws} checked moves the exact residuals give "
            f"an {out.batch_size}-row minibatch mean with median excess kurtosis {out.excess_kurtosis:.3g} and skewness "
            f"{out.skewness:.3g}, a mean acceptance-probability error of {out.acceptance_error:.3g} > {out.acceptance_error_max:g} "
            f"per step; the exact residual s.d. is {out.sd_ratio:.3g}x the median residual_sd the run recorded"
            + (
                missed_advice(out)
                if out.sd_ratio > MISSED_ROWS
                else ": the minibatches saw the residuals, which are themselves far from normal at this batch size. Raise"
            )
            + " the batch size, or sample with an exact test (BarkerTest, MetropolisTest)",
            stacklevel=3,
        )


def missed_advice(out: ProxyCheck) -> str:
    """What to do about rows the minibatches missed: enable the exact stratum, or (already on) what is left."""
    if not out.stratum:
        return ", so its minibatches mostly missed the rows that matter. Enable the exact stratum (auto_sample(stratum=True)), raise"
    return (
        f", so its minibatches mostly missed rows that matter, which the exact stratum (on, {out.stratum_rows} rows) "
        "did not take: raise"
    )

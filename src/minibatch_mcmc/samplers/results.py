"""What a run returns: draws, per-step records, a summary and ArviZ ``InferenceData``."""

from __future__ import annotations

import warnings
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

PyTree = Any

RECORD_FIELDS = (
    "accepted",
    "batch_size",
    "hidden_data",
    "s2",
    "epsilon",
    "delta_star",
    "residual_sd",
    "pvalue_threshold",
    "half_width",
    "expected_batch_size",
    "fallback",
    "bound_exceeded",
)
"""Per-step records kept for every step and chain (the fields of ``acceptance.base.TestOutcome`` but ``nonfinite``)."""


class SampleResult(NamedTuple):
    """Draws (leading axes ``(chain, draw)``), per-step records and run metadata."""

    positions: PyTree
    """Pytree of numpy arrays shaped ``(num_chains, num_draws, *param_shape)``: for a model with a ``constrain`` map
    (a NumPyro model) the constrained and deterministic values under the model's names, else the draws as sampled."""
    records: dict
    """Each of ``RECORD_FIELDS`` (one meaning each, see ``TestOutcome``): arrays ``(num_chains, num_draws)``."""
    method: str
    n_data: int
    temperature: np.ndarray
    """Temperature of the target at each step, shape ``(num_draws,)``: the driver's ``K`` times any
    tempering the test applies itself (MINT's ``T = n^(1 - lambda)``)."""
    wall_time: float
    """Seconds spent sampling, compilation included."""
    interrupted: bool = False
    """True when the run was stopped early and holds only the finished draws."""
    unconstrained: PyTree | None = None
    """The draws as the kernel moved them, when the model's ``constrain`` reports them otherwise; ``None``: as ``positions``."""
    filled: tuple[str, ...] | None = None
    """The optional records (``acceptance.registry.OPTIONAL_RECORDS``) the run's test fills, from its contract:
    ``summary()`` reports only their statistics; ``None``: not declared, all of them."""
    exact_rows: int = 0
    """Rows evaluated in full at every test besides the minibatch (a control variate's exact stratum); 0: none."""

    @property
    def kernel_positions(self) -> PyTree:
        """The draws in the space the kernel samples (unconstrained for a model with ``constrain``)."""
        return self.positions if self.unconstrained is None else self.unconstrained

    @property
    def num_chains(self) -> int:
        """Number of chains."""
        return int(self.records["accepted"].shape[0])

    @property
    def num_draws(self) -> int:
        """Number of recorded draws per chain."""
        return int(self.records["accepted"].shape[1])

    def summary(self, posterior: bool = True) -> dict:
        """Acceptance rate, minibatch-size statistics, data consumption, the statistics of the records the test fills
        and (``posterior``) the posterior table: keys explained in ``SUMMARY_KEYS``.

        Args:
            posterior: Include ArviZ's table of the draws (mean, s.d., MCSE, bulk and tail ESS, R-hat).
        """
        return summarize(self, posterior)

    def to_inference_data(self, unconstrained: bool = False):
        """ArviZ ``InferenceData`` with ``posterior`` and ``sample_stats`` (the per-step records).

        Args:
            unconstrained: Put the kernel's own coordinates in ``posterior`` instead of the reported ones.
        """
        return to_inference_data(self, unconstrained)


def constrain_draws(constrain: Callable[[PyTree], dict], positions: PyTree, chunk: int = 4096) -> dict:
    """``constrain`` applied to every draw of a ``(chain, draw, ...)`` pytree, ``chunk`` draws at a time."""
    leaves = jax.tree_util.tree_leaves(positions)
    lead = tuple(np.shape(leaves[0])[:2])
    flat = jax.tree_util.tree_map(lambda a: np.reshape(np.asarray(a), (-1, *np.shape(a)[2:])), positions)
    fn = jax.jit(jax.vmap(constrain))
    total = lead[0] * lead[1]
    size = max(1, min(chunk, total))

    def piece(
        i: int,
    ) -> dict:  # every piece has ``size`` draws (one compilation): the last is padded with its own last draw
        rows = np.minimum(np.arange(i, i + size), total - 1)
        return jax.tree_util.tree_map(
            lambda a: np.asarray(a)[: min(size, total - i)], fn(jax.tree_util.tree_map(lambda a: a[rows], flat))
        )

    parts = [piece(i) for i in range(0, total, size)]
    joined = jax.tree_util.tree_map(lambda *p: np.concatenate(p), *parts)
    return jax.tree_util.tree_map(lambda a: a.reshape(lead + a.shape[1:]), joined)


def _names(positions: PyTree) -> dict:
    """Flatten a position pytree into ``{variable name: array}``."""
    leaves = jax.tree_util.tree_flatten_with_path(positions)[0]
    if len(leaves) == 1 and not leaves[0][0]:
        return {"theta": np.asarray(leaves[0][1])}
    out = {}
    for path, leaf in leaves:
        name = "".join(str(getattr(p, "key", getattr(p, "idx", getattr(p, "name", p)))) + "_" for p in path).strip("_")
        out[name or "theta"] = np.asarray(leaf)
    return out


SUMMARY_KEYS = {
    "data_per_test": "data points read per MH decision, minibatch only (mean over steps and chains)",
    "hidden_data_per_test": "data points read outside the minibatch per step (full-data statistics, gradient rows)",
    "exact_rows_per_test": "rows of the exact stratum, evaluated in full at every test besides the minibatch (held in "
    "memory; 0 without a stratum): data_per_test + hidden_data_per_test + exact_rows_per_test are a step's rows",
    "mean_epsilon": "mean of the per-step CLT (Berry-Esseen) bound on the minibatch mean's normality error (Seita et al., "
    "Corollary 1): only for the tests that compute it (MHminibatch, the penalty test)",
    "mean_residual_sd": "mean s.d. of the per-datum terms read (with a control variate, its residuals)",
    "mean_expected_batch_size": "exact tests (Scalable MH): mean over steps of the Poisson mean of the rows a step reads "
    "(the bounds' total); mean_batch_size is the rows it read",
    "fallback_steps": "exact tests: steps that took the exact full-data test because the expected count exceeded the "
    "test's max_expected (a rule symmetric in the move)",
    "bound_exceeded_steps": "exact tests: steps where an evaluated residual exceeded its per-datum bound (the driver "
    "warns: the test is not exact there)",
    "posterior": "ArviZ's summary of the draws (pandas DataFrame): mean, sd, HDI, MCSE of mean and sd, bulk and tail "
    "ESS and rank-normalised split R-hat per scalar component (Vehtari et al. 2021); constrained for a NumPyro model; "
    "computed in float64 and not rounded",
}
"""What the less obvious ``summary()`` keys mean."""
OPTIONAL_KEYS = {
    "mean_epsilon": "epsilon",
    "mean_pvalue_threshold": "pvalue_threshold",
    "mean_half_width": "half_width",
    "mean_expected_batch_size": "expected_batch_size",
    "fallback_steps": "fallback",
    "bound_exceeded_steps": "bound_exceeded",
    "mean_residual_sd": "residual_sd",
    "max_residual_sd": "residual_sd",
}
"""``summary()`` keys -> the optional record each summarises: shown only when the run's test fills it (``filled``)."""


def as_float64(a: np.ndarray) -> np.ndarray:
    """``a`` in float64 if it is a narrower float (ArviZ reduces in the input's dtype), else as it is."""
    a = np.asarray(a)
    return a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) and a.dtype.itemsize < 8 else a


def posterior_table(positions: PyTree):
    """ArviZ's ``summary`` of ``(chain, draw, ...)`` draws, computed in float64 (``None`` with fewer than 4 draws per chain).

    Each variable is cast to float64 before ArviZ sees it, one at a time: ArviZ sums in the draws' dtype, and a
    float32 sum over 4096 x 500 logistic-regression draws put the mean 0.58 posterior s.d. off and the s.d. 15% high.
    Unrounded (ArviZ rounds to 3 decimals by default, coarser than a posterior s.d. of 1e-3 on tall data).
    """
    named = _names(positions)
    if min(np.shape(a)[1] for a in named.values()) < 4:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz as az
        import pandas as pd

        tables = [
            az.summary(az.convert_to_dataset({name: as_float64(a)}), kind="all", round_to="none")
            for name, a in named.items()
        ]
        return pd.concat(tables)


def summarize(result: SampleResult, posterior: bool = True) -> dict:
    """Summary statistics of a run's per-step records and (``posterior``) ArviZ's table of its draws.

    Args:
        result: The run.
        posterior: Include ``"posterior"``, ArviZ's table of the draws (mean, s.d., MCSE, bulk and tail ESS, R-hat).

    Returns:
        A dict: acceptance rate, minibatch-size statistics, data read, the statistics of the records the run's test
        fills, and the posterior table; its keys are explained in ``SUMMARY_KEYS``.
    """
    rec = result.records  # whole-array float32 means: NumPy's pairwise sums, ~1e-7 relative at any length
    bs = np.asarray(rec["batch_size"], dtype=np.float64)
    steps = bs.size
    total = float(bs.sum())
    pct = np.percentile(bs, [50, 90, 99]) if steps else [np.nan] * 3
    out = {
        "method": result.method,
        "temperature": float(result.temperature[-1]) if len(result.temperature) else float("nan"),
        "chains": result.num_chains,
        "draws": result.num_draws,
        "n_data": result.n_data,
        "acceptance_rate": float(np.mean(rec["accepted"])) if steps else float("nan"),
        "mean_batch_size": float(bs.mean()) if steps else float("nan"),
        "sd_batch_size": float(bs.std()) if steps else float("nan"),
        "median_batch_size": float(pct[0]),
        "p90_batch_size": float(pct[1]),
        "p99_batch_size": float(pct[2]),
        "max_batch_size": float(bs.max()) if steps else float("nan"),
        "data_per_test": total / steps if steps else float("nan"),
        "fraction_of_n_per_test": total / steps / result.n_data if steps else float("nan"),
        "total_data_consumed": total,
        "hidden_data_per_test": float(np.mean(rec["hidden_data"])) if steps else float("nan"),
        "total_hidden_data": float(np.sum(rec["hidden_data"], dtype=np.float64)),
        "exact_rows_per_test": float(result.exact_rows),
        "mean_epsilon": float(np.mean(rec["epsilon"])) if steps else float("nan"),
        "mean_pvalue_threshold": float(np.mean(rec["pvalue_threshold"]))
        if steps and "pvalue_threshold" in rec
        else float("nan"),
        "mean_half_width": float(np.mean(rec["half_width"])) if steps and "half_width" in rec else float("nan"),
        "mean_expected_batch_size": float(np.mean(rec["expected_batch_size"]))
        if steps and "expected_batch_size" in rec
        else float("nan"),
        "fallback_steps": int(np.sum(rec["fallback"])) if "fallback" in rec else 0,
        "bound_exceeded_steps": int(np.sum(rec["bound_exceeded"])) if "bound_exceeded" in rec else 0,
        "mean_residual_sd": float(np.mean(rec["residual_sd"])) if steps and "residual_sd" in rec else float("nan"),
        "max_residual_sd": float(np.max(rec["residual_sd"])) if steps and "residual_sd" in rec else float("nan"),
        "wall_time_s": result.wall_time,
        "interrupted": result.interrupted,
    }
    if result.filled is not None:  # only the statistics of the records the test fills
        out = {k: v for k, v in out.items() if k not in OPTIONAL_KEYS or OPTIONAL_KEYS[k] in result.filled}
    return out | ({"posterior": posterior_table(result.positions)} if posterior else {})


def to_inference_data(result: SampleResult, unconstrained: bool = False):
    """Convert to ArviZ ``InferenceData`` (posterior + sample_stats with the per-step records), floats in float64.

    ArviZ computes in the dtype it is given, so float32 draws are handed over as float64 (the same values):
    its ``summary``, ``ess`` and ``loo`` of the result then sum in float64 at any number of draws.

    Args:
        result: The run.
        unconstrained: Put the kernel's own coordinates in ``posterior`` (``result.unconstrained``) instead of the
            reported ones (constrained and named, for a NumPyro model).

    Returns:
        An ``arviz.InferenceData`` with groups ``posterior`` and ``sample_stats``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az

    posterior = {
        k: as_float64(v) for k, v in _names(result.kernel_positions if unconstrained else result.positions).items()
    }
    stats = {k: as_float64(v) for k, v in result.records.items()}
    stats["acceptance_rate"] = stats["accepted"].astype(np.float64)
    stats["temperature"] = np.broadcast_to(result.temperature, stats["accepted"].shape).copy()
    attrs = {
        "method": result.method,
        "n_data": int(result.n_data),
        "wall_time_s": float(result.wall_time),
        "interrupted": int(result.interrupted),
        "inference_library": "minibatch-mcmc",
    }
    return az.from_dict(posterior=posterior, sample_stats=stats, attrs=attrs)

"""``glmm``: a generalised linear mixed model from a formula and a table, fitted by ``auto_sample``, with named results.

``mm.glmm("y ~ x1 + x2 + (1 | g) + (x1 | h)", data=df, family="bernoulli")`` builds the design (``interop.formula``),
the model (``models.glmm``), runs ``warmup.auto_sample`` and returns a ``GLMMResult``: ArviZ ``InferenceData`` whose
variables are named as bambi names them (each fixed effect by its column, ``"Intercept"``, ``"x1"``, ``"c[b]"``; each
group term ``"1|g"``, ``"x1|h"`` over its factor's levels, so a row of ``az.summary`` reads ``1|g[level]``; each s.d.
``"sd(1|g)"``; ``"sigma"``, ``"nu"``, ``"alpha"``), and ``predict`` for new rows, whose new levels get effect 0 or a draw
from ``N(0, sd)`` per posterior draw (brms's ``allow_new_levels`` with ``sample_new_levels = "gaussian"``).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

from minibatch_mcmc.checks import check_choice
from minibatch_mcmc.interop.formula import FormulaDesign, formula_design, new_rows
from minibatch_mcmc.models.glmm import GLMMPrior, glmm_model, initial_theta
from minibatch_mcmc.samplers.results import SampleResult, as_float64
from minibatch_mcmc.warmup import Warmup, auto_sample

KINDS = ("mean", "linear")
NEW_LEVELS = ("zero", "sample")
INVERSE_LINK = {
    "bernoulli": lambda eta: 1.0 / (1.0 + np.exp(-eta)),
    "binomial": lambda eta: 1.0 / (1.0 + np.exp(-eta)),
    "poisson": np.exp,
    "negative_binomial": np.exp,
    "gaussian": lambda eta: eta,
    "student_t": lambda eta: eta,
}
"""Each family's mean of the response given ``eta`` (the binomial's: the probability of one trial's success)."""


def term_variable(term: str, factor: str) -> str:
    """The name of a group term's variable, as formulae/bambi write it (``"1|g"``, ``"x1|h"``)."""
    return f"{term}|{factor}"


def factor_dim(factor: str) -> str:
    """The dimension of a factor's levels (bambi's ``"g__factor_dim"``: apart from any variable's name)."""
    return f"{factor}__factor_dim"


def named_draws(fitted: FormulaDesign, draws: dict) -> tuple[dict, dict, dict]:
    """``(posterior, coords, dims)`` for ArviZ: the model's ``(chain, draw, ...)`` draws under the effects' names."""
    design = fitted.design
    posterior = {name: draws["beta"][..., j] for j, name in enumerate(design.fixed)}
    coords, dims = {}, {}
    for f in design.factors:
        coords[factor_dim(f.name)] = list(f.levels)
        for j, term in enumerate(f.terms):
            name = term_variable(term, f.name)
            posterior[name] = draws[f"u_{f.name}"][..., j]
            dims[name] = [factor_dim(f.name)]
            posterior[f"sd({name})"] = draws[f"sd_{f.name}"][..., j]
    for extra in ("sigma", "nu", "alpha"):
        if extra in draws:
            posterior[extra] = draws[extra]
    return {k: as_float64(np.asarray(v)) for k, v in posterior.items()}, coords, dims


def flat_draws(draws: dict) -> dict:
    """Each ``(chain, draw, ...)`` array as ``(chain * draw, ...)``."""
    return {k: np.reshape(np.asarray(v, dtype=np.float64), (-1, *np.shape(v)[2:])) for k, v in draws.items()}


def group_part(
    u: np.ndarray, sd: np.ndarray, codes: np.ndarray, z: np.ndarray, new_levels: str, rng: np.random.Generator
) -> np.ndarray:
    """``(S, n)``: ``z_i . u[g(i)]`` per draw; a new level's effect 0 (``"zero"``) or ``N(0, sd^2)`` per draw (``"sample"``)."""
    s, g, k = u.shape
    fresh = int(codes.max(initial=g - 1)) + 1 - g
    if fresh and new_levels == "sample":
        extra = rng.standard_normal((s, fresh, k)) * sd[:, None, :]
    else:
        extra = np.zeros((s, fresh, k))
    effects = np.concatenate([u, extra], axis=1)[:, codes, :]
    return np.einsum("snk,nk->sn", effects, z)


class GLMMResult(NamedTuple):
    """A fitted GLMM: the design it came from, the run, and its draws under the effects' names."""

    fitted: FormulaDesign
    """The design and what rebuilds its columns for new rows (``interop.formula``)."""
    result: SampleResult
    """The run (``positions``: the model's ``beta``, ``sd_<factor>``, ``u_<factor>``, family extras)."""
    warmup: Warmup
    centred: bool | str
    """How the group effects were written: ``"auto"``, True (centred) or False (non-centred)."""
    centring: tuple = ()
    """Per factor, the ``(G_f, k_f)`` weights the sampler worked in (``models.glmm_centring``: 1 centred, 0 non-centred)."""

    @property
    def family(self) -> str:
        """The response family."""
        return self.fitted.family

    def to_inference_data(self):
        """ArviZ ``InferenceData``: ``posterior`` under the effects' names (module docstring), ``sample_stats`` the run's."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import arviz as az

        posterior, coords, dims = named_draws(self.fitted, self.result.positions)
        run = self.result.to_inference_data()
        named = az.from_dict(posterior=posterior, coords=coords, dims=dims, attrs=dict(run.posterior.attrs))
        return az.InferenceData(posterior=named.posterior, sample_stats=run.sample_stats)

    def summary(self) -> dict:
        """The run's statistics (``SampleResult.summary``) and ``"posterior"``: ArviZ's table under the effects' names."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import arviz as az

            table = az.summary(self.to_inference_data(), kind="all", round_to="none")
        return {**self.result.summary(posterior=False), "posterior": table}

    def predict(
        self, new_data, *, kind: str = "mean", new_levels: str = "zero", seed: int = 0, offset: Any = None
    ) -> np.ndarray:
        """``(S, n_new)`` draws of each new row's mean (``kind="mean"``) or linear predictor (``"linear"``).

        ``new_data``: a DataFrame, dict of arrays or Parquet path with the formula's columns (the response not needed);
        a level the fit did not see gets effect 0 (``new_levels="zero"``) or, per draw, ``N(0, sd^2)`` drawn once per
        new level (``"sample"``, with ``seed``). ``offset``: the new rows' ``offset=`` values (required where the fit's
        ``offset=`` was an array; else its column is read from ``new_data``); ``offset(...)`` terms are read from it.
        """
        check_choice(kind, "kind", KINDS)
        check_choice(new_levels, "new_levels", NEW_LEVELS)
        rows = new_rows(self.fitted, new_data, offset=offset)
        draws = flat_draws(self.result.positions)
        eta = draws["beta"] @ rows.x.T
        if rows.offset is not None:
            eta = eta + rows.offset[None, :]
        rng = np.random.default_rng(seed)
        for f, codes, z in zip(self.fitted.design.factors, rows.codes, rows.z):
            eta = eta + group_part(draws[f"u_{f.name}"], draws[f"sd_{f.name}"], codes, z, new_levels, rng)
        return eta if kind == "linear" else INVERSE_LINK[self.family](eta)


def glmm(
    formula: str,
    data,
    family: str = "bernoulli",
    *,
    centred: bool | str = "auto",
    seed: int = 0,
    num_samples: int = 1000,
    num_chains: int = 4,
    offset: Any = None,
    trials: Any = None,
    prior: GLMMPrior = GLMMPrior(),
    extra_namespace: dict | None = None,
    progress: bool = True,
    sample_as_written: bool = False,
    **sample_kwargs: Any,
) -> GLMMResult:
    """Fit the GLMM ``formula`` (lme4/brms syntax, ``interop.formula``) to ``data`` with ``auto_sample``.

    Args:
        formula: the model, e.g. ``"y ~ x1 + (1 | g) + (x1 | h)"`` (``(1 | g:h)`` for observed pairs).
        data: a pandas DataFrame, a dict of arrays or a Parquet file or directory (only the formula's columns are read).
        family: one of ``models.glmm_families.FAMILIES``.
        centred: ``"auto"`` (each level's effects centred where its data pin them, non-centred where the prior does,
            partially between: ``models.glmm_centring``), or how the model is written, True (centred) or False
            (non-centred): sampled in the auto weights all the same unless ``sample_as_written=True``; the reported
            ``1|g``, ``sd(1|g)`` are the same quantities whatever the sampler works in.
        seed: keys the warm-up and the chains.
        num_samples: draws per chain.
        num_chains: chains.
        offset: a column name or an array added to the linear predictor (or ``offset(...)`` in the formula).
        trials: the binomial trials, a column name or an array (or ``y | trials(n)`` in the formula).
        prior: the priors of the fixed effects, the group s.d.s and the family's extras.
        extra_namespace: names the formula may call besides formulae's own (e.g. user functions).
        progress: print the warm-up's and sampling's progress lines.
        sample_as_written: sample all effects centred (``centred=True``) or non-centred (False), warned where the
            pilot measures that form poor.
        **sample_kwargs: further keywords for ``auto_sample``.

    Returns:
        A ``GLMMResult``: named effects (``to_inference_data``, ``summary``) and ``predict`` for new rows.
    """
    fitted = formula_design(formula, data, family, offset=offset, trials=trials, extra_namespace=extra_namespace)
    model, model_data = glmm_model(
        fitted.design, fitted.family, centred=centred, prior=prior, sample_as_written=sample_as_written
    )
    result, warm = auto_sample(
        model,
        model_data,
        initial_theta(model),
        num_samples=num_samples,
        num_chains=num_chains,
        key=seed,
        progress=progress,
        **sample_kwargs,
    )
    return GLMMResult(fitted, result, warm, centred, model.glmm.layout.centring)

"""Generalised linear mixed models (GLMMs) from a ``GLMMDesign``: a ``Model`` on one flat parameter vector, and its data.

Row ``i``: ``y_i ~ family(eta_i, phi)``, ``eta_i = x_i . beta + sum_f z_{f,i} . u_f[g_f(i)] (+ offset_i)``
(``models.glmm_families``: bernoulli and binomial with logit link, poisson and negative binomial with log link,
gaussian and student-t with identity link).

Data (``glmm_model``'s second value, numpy arrays with ``N`` rows): ``"x"`` (N, p), ``"y"`` (N,), for factor number
``f`` (in design order) ``"g_<f>"`` (N,) int32 level codes and ``"z_<f>"`` (N, k_f) its columns; ``"offset"`` (N,) and
``"trials"`` (N,) when the design has them (the binomial needs trials).

The flat parameter ``theta`` (length ``d = p + sum_f (G_f k_f + k_f) + e``), in this order:

1. ``beta`` (p,): the fixed effects;
2. for each factor ``f``: its effects, ``G_f * k_f`` entries read as a ``(G_f, k_f)`` array row by row, each ``e`` with
   ``u = sd^(1 - w) e`` and prior ``e ~ N(0, sd^(2 w))`` for its weight ``w`` (``GLMMLayout.centring``): ``u`` itself
   where ``w = 1`` (centred), the standardised ``a = u / sd`` where ``w = 0`` (non-centred, which keeps a group with few
   rows out of the funnel), partially centred between. ``centred="auto"`` (the default) takes each level's weight from
   a pilot fit (``models.glmm_centring``: near 1 where the data pin the effect, near 0 where the prior does);
   ``centred=True``/``False`` say how the model is written (``False`` adds the standardised ``"a_<name>"`` to what
   ``constrain`` reports) and are sampled in the pilot's weights too, unless ``sample_as_written=True`` (then all 1
   or all 0, with a warning naming the levels where the pilot measured that form poor). The posterior of
   ``(beta, u, sd)`` is the same under every choice of weights;
3. for each factor ``f``: ``log sd_f`` (k_f,): the effects' standard deviations. ``Sigma_u`` is diagonal: the
   ``k_f`` effects of a level are independent a priori (correlated random slopes, an LKJ prior, are left for later);
4. the family's ``phi`` (e,) on its unconstrained scale (``log sigma``; ``log sigma, log(nu - 1)``; ``log alpha``).

Priors (``GLMMPrior``), weakly informative in the spirit of rstanarm/brms/bambi: each fixed effect
``beta_j ~ N(0, (fixed_scale * s_y / sd(x_j))^2)`` (rstanarm's autoscaling, so the prior does not depend on a column's
units), a constant column ``N(m_y, (intercept_scale * s_y)^2)``; group s.d.s ``sd_fj ~ HalfStudentT(3, sd_scale * s_y)``
(brms's default) or ``HalfNormal(sd_scale * s_y)``, with the log-Jacobian of ``log sd``; ``s_y = 1`` and ``m_y = 0``
for the discrete families, the response's MAD and median for gaussian and student-t (brms's scale); the family
extras as ``glmm_families`` says (``sigma``'s scale ``sd_scale * s_y``). ``Model.constrain(theta)`` reports ``"beta"``, ``"sd_<name>"`` (k_f,), ``"u_<name>"``
(G_f, k_f) on the ``eta`` scale, and ``"sigma"``/``"nu"``/``"alpha"`` when the family has them.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm

from minibatch_mcmc.checks import check_choice, check_positive
from minibatch_mcmc.data.aligned import aligned
from minibatch_mcmc.models.base import GLMMLayout, GLMMSpec, Model
from minibatch_mcmc.models.glmm_centring import Centring, centring_weights, fixed_centring, written_mismatch
from minibatch_mcmc.models.glmm_design import GLMMDesign, check_design
from minibatch_mcmc.models.glmm_families import (
    CONTINUOUS,
    EXTRAS,
    SHARED,
    check_family,
    constrain_extras,
    extras_log_prior,
    half_log_density,
    row_log_density,
    row_part,
    shared_log_density,
)
from minibatch_mcmc.models.shapes import Dims, shape_check
from minibatch_mcmc.models.shared_term import SharedTerm

PyTree = dict


class GLMMPrior(NamedTuple):
    """The weakly informative default priors of a GLMM (module docstring); every scale in units of ``s_y``."""

    fixed_scale: float = 2.5
    """``beta_j ~ N(0, (fixed_scale * s_y / sd(x_j))^2)`` for a non-constant column ``x_j``."""
    intercept_scale: float = 10.0
    """A constant column's coefficient ``~ N(m_y, (intercept_scale * s_y)^2)``."""
    sd: str = "half_student_t"
    """``"half_student_t"`` (3 degrees of freedom) or ``"half_normal"``: the prior of each group s.d."""
    sd_scale: float = 2.5
    """The group s.d.s' prior scale."""


class Scales(NamedTuple):
    """The prior's numbers for one data set: each coefficient's location and scale, the s.d. and sigma scales."""

    beta_loc: np.ndarray
    beta_scale: np.ndarray
    sd_scale: float
    sigma_scale: float


def response_scale(family: str, y: np.ndarray) -> tuple[float, float]:
    """``(m_y, s_y)``: the median and MAD (1.4826 times the median absolute deviation) of ``y`` for continuous families, else (0, 1)."""
    if family not in CONTINUOUS or np.size(y) == 0:
        return 0.0, 1.0
    y = np.asarray(y, np.float64)
    med = float(np.median(y))
    mad = 1.4826 * float(np.median(np.abs(y - med)))
    return med, mad if mad > 0 else max(float(np.std(y)), 1.0)


def prior_scales(design: GLMMDesign, family: str, prior: GLMMPrior) -> Scales:
    """The prior's locations and scales for ``design`` (constant columns get the intercept's prior)."""
    m_y, s_y = response_scale(family, design.y)
    x = np.asarray(design.x)
    # column by column in float64: no float64 copy of all of x (0.3 GB at N = 10^7)
    sd = np.array([np.asarray(x[:, j], np.float64).std() if x.shape[0] else 0.0 for j in range(x.shape[1])])
    constant = sd <= 1e-12 * (1.0 + np.abs(x).max(axis=0, initial=0.0))
    scale = np.where(constant, prior.intercept_scale * s_y, prior.fixed_scale * s_y / np.where(constant, 1.0, sd))
    first = x[0] if x.shape[0] else np.ones(x.shape[1])
    loc = np.where(constant & (first != 0), m_y / np.where(first != 0, first, 1.0), 0.0)
    return Scales(loc, scale, prior.sd_scale * s_y, prior.sd_scale * s_y)


def effect_weights(layout: GLMMLayout) -> tuple:
    """Per factor the ``(G_f, k_f)`` centring weights (``GLMMLayout.centring``; all 1 or all 0 when it is empty)."""
    if layout.centring:
        return tuple(np.asarray(w, np.float64) for w in layout.centring)
    return tuple(np.full((g, k), 1.0 if layout.centred else 0.0) for g, k in zip(layout.levels, layout.columns))


def split_theta(layout: GLMMLayout, theta: jax.Array) -> tuple[jax.Array, tuple[jax.Array, ...], jax.Array]:
    """``(beta, (u_f on the eta scale, ...), phi)`` from the flat parameter (traceable): ``u = sd^(1 - w) e``."""
    blocks = effect_blocks(layout, theta)
    us = tuple(
        e * jnp.exp((1.0 - jnp.asarray(w, theta.dtype)) * s[None, :])
        for e, s, w in zip(blocks[1], blocks[2], effect_weights(layout))
    )
    return blocks[0], us, blocks[3]


def effect_blocks(layout: GLMMLayout, theta: jax.Array) -> tuple[jax.Array, tuple, tuple, jax.Array]:
    """``(beta, (effects_f as (G_f, k_f): u_f or a_f, ...), (log sd_f, ...), phi)``: the flat parameter's blocks."""
    at = layout.fixed
    beta = theta[:at]
    effects = []
    for g, k in zip(layout.levels, layout.columns):
        effects.append(theta[at : at + g * k].reshape(g, k))
        at += g * k
    log_sds = []
    for k in layout.columns:
        log_sds.append(theta[at : at + k])
        at += k
    return beta, tuple(effects), tuple(log_sds), theta[at : at + len(layout.extras)]


def dimension(layout: GLMMLayout) -> int:
    """``d``: the length of the flat parameter."""
    return layout.fixed + sum(g * k + k for g, k in zip(layout.levels, layout.columns)) + len(layout.extras)


def linear_predictor(layout: GLMMLayout, beta: jax.Array, us: tuple[jax.Array, ...], batch: dict) -> jax.Array:
    """``eta_i = x_i . beta + sum_f z_fi . u_f[g_f(i)] (+ offset_i)`` for each row of ``batch``."""
    eta = batch["x"] @ beta
    for f, u in enumerate(us):
        eta = eta + jnp.sum(batch[f"z_{f}"].astype(eta.dtype) * u[batch[f"g_{f}"]], axis=-1)
    if layout.offset:
        eta = eta + batch["offset"].astype(eta.dtype)
    return eta


def glmm_log_prior(layout: GLMMLayout, scales: Scales, prior: GLMMPrior):
    """``theta -> log p0(theta)``: the fixed effects', the group effects' given their s.d.s, the s.d.s' and the extras' priors."""
    beta_loc, beta_scale = jnp.asarray(scales.beta_loc), jnp.asarray(scales.beta_scale)

    def log_prior(theta: jax.Array) -> jax.Array:
        beta, effects, log_sds, phi = effect_blocks(layout, theta)
        total = jnp.sum(norm.logpdf(beta, beta_loc.astype(theta.dtype), beta_scale.astype(theta.dtype)))
        for e, s, w in zip(effects, log_sds, effect_weights(layout)):
            # e ~ N(0, sd^(2w)): centred (w = 1) u ~ N(0, sd^2); non-centred (w = 0) a ~ N(0, 1)
            total = total + jnp.sum(norm.logpdf(e, 0.0, jnp.exp(jnp.asarray(w, theta.dtype) * s[None, :])))
            total = total + jnp.sum(half_log_density(prior.sd, jnp.exp(s), scales.sd_scale) + s)
        return total + extras_log_prior(layout.family, phi, scales.sigma_scale)

    return log_prior


def glmm_data(design: GLMMDesign, family: str) -> dict:
    """The data dict of a GLMM (module docstring) from ``design``, as numpy arrays (float32 columns, int32 codes) that
    JAX shares rather than copies: the design's own where they are already such (``data.aligned``), else one copy."""
    data = {"x": aligned(design.x, np.float32), "y": aligned(design.y, np.float32)}
    for f, factor in enumerate(design.factors):
        data[f"g_{f}"] = aligned(factor.codes, np.int32)
        data[f"z_{f}"] = aligned(factor.z, np.float32)
    if design.offset is not None:
        data["offset"] = aligned(design.offset, np.float32)
    if family == "binomial":
        if design.trials is None:
            raise ValueError("family='binomial' needs the design's trials (the number of trials of each row)")
        data["trials"] = aligned(design.trials, np.float32)
    return data


def check_response(family: str, y: np.ndarray, trials: np.ndarray | None) -> None:
    """A ValueError naming the family and the bad values when ``y`` is not a response ``family`` can have."""
    y = np.asarray(y, np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"family={family!r}: y has {int(np.sum(~np.isfinite(y)))} non-finite values")
    if family == "bernoulli" and not np.all((y == 0) | (y == 1)):
        raise ValueError("family='bernoulli': y must be 0 or 1 (use 'binomial' with trials for counts of successes)")
    if family in ("binomial", "poisson", "negative_binomial") and not np.all((y >= 0) & (y == np.round(y))):
        raise ValueError(f"family={family!r}: y must be non-negative integer counts")
    if family == "binomial" and trials is not None and not np.all(np.asarray(trials) >= y):
        raise ValueError("family='binomial': every y must be at most its row's trials")


def sampled_centring(
    design: GLMMDesign, family: str, centred: bool | str, sample_as_written: bool, scales: Scales
) -> tuple[np.ndarray, ...]:
    """The weights the sampler works in (module docstring), warning where ``sample_as_written`` keeps a form measured poor."""
    if centred not in (True, False, "auto"):
        raise ValueError(f"centred={centred!r}: use True (centred), False (non-centred) or 'auto' (chosen per level)")
    if len(design.y) == 0:
        return fixed_centring(design, centred is not False)
    pilot: Centring = centring_weights(design, family, scales.beta_loc, scales.beta_scale)
    if not sample_as_written or centred == "auto":
        return pilot.weights
    why = written_mismatch(pilot, bool(centred), tuple(f.name for f in design.factors))
    if why is not None:
        warnings.warn(
            f"glmm_model: {why}; centred='auto' or sample_as_written=False samples each level in the "
            "parameterisation its data call for (the same posterior)",
            UserWarning,
            stacklevel=3,
        )
    return fixed_centring(design, bool(centred))


def glmm_model(
    design: GLMMDesign,
    family: str = "bernoulli",
    *,
    centred: bool | str = "auto",
    prior: GLMMPrior = GLMMPrior(),
    sample_as_written: bool = False,
) -> tuple[Model, dict]:
    """The GLMM of ``design`` with ``family`` (module docstring: data keys, parameter layout, priors) and its data.

    ``centred``: ``"auto"``, or how the model is written (True centred, False non-centred); the sampler works in the
    pilot's per-level weights unless ``sample_as_written`` (module docstring, ``models.glmm_centring``)."""
    check_design(design)
    check_family(family)
    check_choice(prior.sd, "prior.sd", ("half_student_t", "half_normal"))
    for name in ("fixed_scale", "intercept_scale", "sd_scale"):
        check_positive(getattr(prior, name), f"prior.{name}")
    check_response(family, design.y, design.trials)
    scales = prior_scales(design, family, prior)
    weights = sampled_centring(design, family, centred, bool(sample_as_written), scales)
    layout = GLMMLayout(
        family=family,
        fixed=int(np.shape(design.x)[1]),
        names=tuple(f.name for f in design.factors),
        levels=tuple(len(f.levels) for f in design.factors),
        columns=tuple(len(f.terms) for f in design.factors),
        extras=EXTRAS[family],
        centred=centred is not False,
        offset=design.offset is not None,
        centring=tuple(np.asarray(w, np.float32) for w in weights),
    )
    data = glmm_data(design, family)

    def split(theta: jax.Array) -> tuple[jax.Array, tuple[jax.Array, ...], jax.Array]:
        return split_theta(layout, theta)

    def density(eta: jax.Array, phi: jax.Array, batch: dict) -> jax.Array:
        return row_log_density(family, eta, phi, batch)

    def log_lik(theta: jax.Array, batch: dict) -> jax.Array:
        beta, us, phi = split(theta)
        return density(linear_predictor(layout, beta, us, batch), phi, batch)

    def constrain(theta: jax.Array) -> dict:
        beta, us, phi = split(theta)
        _, _, log_sds, _ = effect_blocks(layout, theta)
        out = {"beta": beta}
        for name, u, s in zip(layout.names, us, log_sds):
            out[f"sd_{name}"], out[f"u_{name}"] = jnp.exp(s), u
            if not layout.centred:  # written non-centred: its standardised effects too
                out[f"a_{name}"] = u * jnp.exp(-s)[None, :]
        return {**out, **constrain_extras(family, phi)}

    def shared_density(phi: jax.Array) -> jax.Array:
        return shared_log_density(family, phi)

    def rows_density(eta: jax.Array, phi: jax.Array, batch: dict) -> jax.Array:
        return row_part(family, eta, phi, batch)

    def shared_value(theta: jax.Array) -> jax.Array:
        return shared_density(split(theta)[2])

    def shared_rows(theta: jax.Array, batch: dict) -> jax.Array:
        beta, us, phi = split(theta)
        return rows_density(linear_predictor(layout, beta, us, batch), phi, batch)

    has_shared = family in SHARED
    spec = {"x": Dims("b", layout.fixed), "y": Dims("b")}
    for f, k in enumerate(layout.columns):
        spec[f"g_{f}"], spec[f"z_{f}"] = Dims("b"), Dims("b", k)
    spec.update({key: Dims("b") for key in ("offset", "trials") if key in data})
    model = Model(
        log_prior=glmm_log_prior(layout, scales, prior),
        log_lik=log_lik,
        name=f"glmm_{family}",
        check_shapes=shape_check(f"glmm_{family}", Dims(dimension(layout)), spec),
        constrain=constrain,
        glmm=GLMMSpec(layout, split, density, *((shared_density, rows_density) if has_shared else ())),
        shared=SharedTerm(shared_value, shared_rows) if has_shared else None,
    )
    return model, data


def initial_theta(model: Model) -> jax.Array:
    """A start for a GLMM: every coefficient and effect 0, every s.d. and extra at its unconstrained 0 (``sd = 1``)."""
    if model.glmm is None:
        raise ValueError(f"model {model.name!r} is not a GLMM (its glmm field is None)")
    return jnp.zeros(dimension(model.glmm.layout), jnp.float32)

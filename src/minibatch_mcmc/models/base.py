"""The model interface: a log-prior plus a vectorised per-datum log-likelihood."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.models.shared_term import SharedTerm

PyTree = Any


class GLMSpec(NamedTuple):
    """What makes a model a generalised linear model: ``l_i(theta) = f(x_i . theta + offset_i; y_i)`` for a known family."""

    family: str
    """``"logistic"``, ``"probit"``, ``"poisson"`` (log link), ``"gaussian"`` or ``"student_t"`` (identity link)."""
    precision: float = 1.0
    """The Gaussian family's noise precision (``f = -precision (y - eta)^2 / 2``), the Student-t's ``1 / sigma^2``; 1 for
    the others."""
    offset: bool = False
    """The linear predictor adds the data's ``"offset"`` column (a Poisson log-exposure)."""
    nu: float = 1.0
    """The Student-t family's degrees of freedom (fixed; its ``precision`` is ``1 / sigma^2``); unused by the others."""
    exact_default: bool = False
    """The warm-up's default test is the exact one where its bounds predict at most the penalty test's rows
    (``warmup.exact_choice``); set by ``from_numpyro`` for a model it recognised as a GLM."""


class GLMMLayout(NamedTuple):
    """Where each block of a GLMM's flat parameter vector lies (``models.glmm``'s module docstring), and its family."""

    family: str
    """``"bernoulli"``, ``"binomial"``, ``"poisson"``, ``"negative_binomial"``, ``"gaussian"`` or ``"student_t"``."""
    fixed: int
    """``p``: the number of fixed effects ``beta``."""
    names: tuple[str, ...]
    """Each grouping factor's name."""
    levels: tuple[int, ...]
    """Each factor's number of levels ``G_f``."""
    columns: tuple[int, ...]
    """Each factor's number of columns ``k_f``."""
    extras: tuple[str, ...]
    """The family's shared parameters ``phi`` (``("sigma",)``, ``("sigma", "nu")``, ``("alpha",)`` or none)."""
    centred: bool
    """True: the group effects ``u_f`` are parameters; False: ``a_f`` with ``u_f = sd_f * a_f``."""
    offset: bool = False
    """The data carry ``"offset"``, added to every ``eta_i``."""
    centring: tuple = ()
    """Per factor, ``(G_f, k_f)`` weights in ``[0, 1]``: each effect sampled as ``e`` with ``u = sd^(1 - w) e``,
    ``e ~ N(0, sd^(2 w))`` (1 centred, 0 non-centred; ``models.glmm_centring``); empty: every weight 1 if ``centred``, else 0."""


class GLMMSpec(NamedTuple):
    """What makes a model a GLMM: ``l_i(theta) = f(eta_i, phi; y_i)``, ``eta_i = x_i . beta + sum_f z_fi . u_f[g_f(i)]``."""

    layout: GLMMLayout
    """The flat parameter's blocks and the family."""
    split: Callable[[jax.Array], tuple[jax.Array, tuple[jax.Array, ...], jax.Array]]
    """``theta -> (beta (p,), (u_f (G_f, k_f), ...), phi (e,))``, ``phi`` on its unconstrained scale (pure, traceable)."""
    row_log_density: Callable[[jax.Array, jax.Array, PyTree], jax.Array]
    """``(eta (b,), phi (e,), batch) -> (b,)``: the family's log-density of each row's response (``batch``: ``"y"``, ``"trials"``)."""
    shared_density: Callable[[jax.Array], jax.Array] | None = None
    """``phi -> scalar``: the part of every row's log-density that depends on ``phi`` alone (``glmm_families.SHARED``),
    declared apart as the model's ``Model.shared``; ``None``: the family has none."""
    row_part: Callable[[jax.Array, jax.Array, PyTree], jax.Array] | None = None
    """``(eta, phi, batch) -> (b,)``: ``row_log_density`` less ``shared_density`` (``None`` with it)."""


class Model(NamedTuple):
    """A Bayesian model ``p0(theta) prod_i p(x_i | theta)`` over any pytree ``theta``."""

    log_prior: Callable[[PyTree], jax.Array]
    """``log p0(theta)``: scalar log prior density (may be unnormalised)."""
    log_lik: Callable[[PyTree, PyTree], jax.Array]
    """``log p(x_i | theta)`` for each row of a batch: returns shape ``(b,)``."""
    name: str = "model"
    check_shapes: Callable[[PyTree, PyTree], None] | None = None
    """``check_shapes(theta, batch)`` raises a ValueError naming expected and given shapes; ``sample`` calls it
    once on the start and a data batch before sampling (``None``: no check)."""
    constrain: Callable[[PyTree], dict] | None = None
    """``constrain(theta) -> {name: value}``: one sampled (unconstrained) position to the values a result reports
    under the model's own names (e.g. a NumPyro model's constrained and deterministic sites); ``None``: ``theta``
    is reported as it is sampled."""
    glm: GLMSpec | None = None
    """Set when the model is a generalised linear model with data ``{"x", "y"}``: exact minibatch tests then build
    per-datum residual bounds from it (``control_variates.glm_proxy``); ``None``: not known to be one."""
    glmm: GLMMSpec | None = None
    """Set when the model is a generalised linear mixed model (``models.glmm``): the warm-up then builds the proxy in
    predictor space (``control_variates.glmm``) instead of the dense Taylor proxy; ``None``: not known to be one."""
    shared: SharedTerm | None = None
    """The part of every row's ``log_lik`` that does not depend on the row, declared apart (``models.shared_term``):
    the estimators then add its difference between two parameters, computed accurately once, to the rows' differences
    instead of taking it from each row's float32 value; ``None``: none declared (the per-row ratios as they are)."""


def flat_prior() -> Callable[[PyTree], jax.Array]:
    """Improper uniform prior: ``log p0(theta) = 0``."""

    def log_prior(theta: PyTree) -> jax.Array:
        leaves = jax.tree_util.tree_leaves(theta)
        return jnp.zeros((), dtype=jnp.result_type(*leaves) if leaves else jnp.float32)

    return log_prior


def gaussian_prior(mean: float | jax.Array = 0.0, scale: float | jax.Array = 1.0) -> Callable[[PyTree], jax.Array]:
    """Independent normal prior ``N(mean, scale^2)`` on every element of ``theta``."""

    def log_prior(theta: PyTree) -> jax.Array:
        flat, _ = ravel_pytree(theta)
        z = (flat - mean) / scale
        return (
            -0.5 * jnp.sum(z * z)
            - jnp.sum(jnp.log(scale * jnp.ones_like(flat)))
            - 0.5 * flat.size * jnp.log(2 * jnp.pi)
        )

    return log_prior

"""The response families of ``models.glmm``: each row's log-density in ``(eta, phi)``, the shared parameters ``phi``
on their unconstrained scale, and their priors.

Every density is normalised (the binomial coefficient, ``log y!``, the Gaussian and Student-t constants included),
so a GLMM's log-likelihood equals ``scipy.stats``'s row by row. The gaussian's and the Student-t's densities are the sum
of a part that depends on ``phi`` alone (``shared_log_density``: ``-log sigma`` and the constants, the Student-t's
``gammaln`` and ``log nu`` terms) and a part that varies by row (``row_part``), which ``models.glmm`` declares as
``Model.shared`` (``models.shared_term``), so that float32 does not count the shared part's rounding ``N`` times in a
full-data ratio; the Student-t's row part is ``shared_term.student_t_rows`` (every rounding a per-row one). The negative
binomial's ``phi``-only terms (``alpha log alpha - gammaln(alpha)``) cancel within each row against
``alpha log(alpha + mu)`` and ``gammaln(y + alpha)`` (to 0 in a row with ``y = 0``): taken apart they would leave each
row's part a large term rounded once for all rows with the same ``y``, so it declares none. Links: logit (bernoulli, binomial), log (poisson,
negative binomial: mean ``e^eta``, variance ``mu + mu^2 / alpha``), identity (gaussian, student-t).

``phi`` (unconstrained) and the constrained values ``constrain`` reports: gaussian ``log sigma``; student-t
``log sigma`` and ``log(nu - 1)`` (``nu > 1``, so the mean exists, as brms's lower bound); negative binomial
``log alpha``. Priors (with the log-Jacobian of those maps): ``sigma ~ HalfStudentT(3, scale)`` (brms's default, with
its ``scale`` from the response), ``nu ~ Gamma(2, 0.1)`` (brms's default), ``alpha ~ HalfCauchy(1)`` (bambi's).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln
from jax.scipy.stats import cauchy, gamma, norm
from jax.scipy.stats import t as student

from minibatch_mcmc.models.shared_term import student_t_rows, student_t_value

EXTRAS = {
    "bernoulli": (),
    "binomial": (),
    "poisson": (),
    "negative_binomial": ("alpha",),
    "gaussian": ("sigma",),
    "student_t": ("sigma", "nu"),
}
"""Each family's shared parameters ``phi``, in the order of the flat parameter."""
FAMILIES = tuple(EXTRAS)
CONTINUOUS = ("gaussian", "student_t")
"""Families whose scales (the prior on ``sigma`` and the group s.d.s) follow the response's spread."""
SHARED = CONTINUOUS
"""Families whose row log-density has a part that depends on ``phi`` alone (``shared_log_density``)."""
NU_SHAPE, NU_RATE = 2.0, 0.1
"""``nu ~ Gamma(2, rate 0.1)``: brms's default for the Student-t's degrees of freedom."""
SIGMA_DF = 3.0
"""Degrees of freedom of the half-Student-t priors on scales (brms's ``student_t(3, 0, scale)``)."""


def check_family(family: str) -> str:
    """``family`` itself, or a ValueError naming the families."""
    if family not in EXTRAS:
        raise ValueError(f"family={family!r}: a GLMM's family is one of {', '.join(repr(f) for f in FAMILIES)}")
    return family


def constrain_extras(family: str, phi: jax.Array) -> dict:
    """The family's shared parameters on their own scale (``{"sigma": ..., "nu": ...}``) from unconstrained ``phi``."""
    out = {}
    for j, name in enumerate(EXTRAS[family]):
        out[name] = 1.0 + jnp.exp(phi[j]) if name == "nu" else jnp.exp(phi[j])
    return out


def row_log_density(family: str, eta: jax.Array, phi: jax.Array, batch: dict) -> jax.Array:
    """``log p(y_i | eta_i, phi)`` for each row (``batch["y"]``; ``batch["trials"]`` for the binomial)."""
    y = batch["y"].astype(eta.dtype)
    if family == "bernoulli":
        return y * eta - jax.nn.softplus(eta)
    if family == "binomial":
        n = batch["trials"].astype(eta.dtype)
        return y * eta - n * jax.nn.softplus(eta) + gammaln(n + 1.0) - gammaln(y + 1.0) - gammaln(n - y + 1.0)
    if family == "poisson":
        return y * eta - jnp.exp(eta) - gammaln(y + 1.0)
    if family == "negative_binomial":
        log_alpha = phi[0].astype(eta.dtype)
        alpha = jnp.exp(log_alpha)
        log_total = jnp.logaddexp(log_alpha, eta)  # log(alpha + mu)
        return (
            gammaln(y + alpha)
            - gammaln(alpha)
            - gammaln(y + 1.0)
            + alpha * (log_alpha - log_total)
            + y * (eta - log_total)
        )
    if family in SHARED:
        return row_part(family, eta, phi, batch) + shared_log_density(family, phi.astype(eta.dtype))
    raise ValueError(check_family(family))


def shared_log_density(family: str, phi: jax.Array) -> jax.Array:
    """The part of every row's log-density that depends on ``phi`` alone (a scalar; a ``SHARED`` family only)."""
    if family == "gaussian":
        return -phi[0] - 0.5 * math.log(2.0 * math.pi)
    if family == "student_t":
        return student_t_value(phi[0], jax.nn.softplus(phi[1]))  # log nu = log(1 + e^phi_1)
    raise ValueError(f"family={family!r} has no row-independent part; the families with one: {', '.join(SHARED)}")


def row_part(family: str, eta: jax.Array, phi: jax.Array, batch: dict) -> jax.Array:
    """``row_log_density`` less ``shared_log_density``: the part of each row's log-density that varies by row."""
    y, phi = batch["y"].astype(eta.dtype), phi.astype(eta.dtype)
    if family == "gaussian":
        r = (y - eta) * jnp.exp(-phi[0])
        return -0.5 * r * r
    if family == "student_t":
        return student_t_rows(y - eta, phi[0], jax.nn.softplus(phi[1]))
    raise ValueError(f"family={family!r} has no row-independent part; the families with one: {', '.join(SHARED)}")


def half_log_density(kind: str, x: jax.Array, scale: float) -> jax.Array:
    """Log-density of a half-normal or half-Student-t(3) of ``scale`` at ``x > 0`` (elementwise)."""
    if kind == "half_normal":
        return math.log(2.0) + norm.logpdf(x, 0.0, scale)
    return math.log(2.0) + student.logpdf(x, SIGMA_DF, 0.0, scale)


def extras_log_prior(family: str, phi: jax.Array, sigma_scale: float) -> jax.Array:
    """The priors of the family's shared parameters at unconstrained ``phi``, each with its log-Jacobian."""
    total = jnp.zeros((), phi.dtype)
    for j, name in enumerate(EXTRAS[family]):
        if name == "sigma":
            total = total + half_log_density("half_student_t", jnp.exp(phi[j]), sigma_scale) + phi[j]
        elif name == "nu":
            total = total + gamma.logpdf(1.0 + jnp.exp(phi[j]), NU_SHAPE, scale=1.0 / NU_RATE) + phi[j]
        else:  # alpha
            total = total + math.log(2.0) + cauchy.logpdf(jnp.exp(phi[j]), 0.0, 1.0) + phi[j]
    return total

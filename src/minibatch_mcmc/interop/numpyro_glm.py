"""Recognising a generalised linear model in a NumPyro model, so that its user gets the exact tests' per-datum bounds.

A model is recognised as a GLM when its one observed site (in the data plate, one value per row) has a distribution
of a family the GLM proxies know (``control_variates.glm_families``) whose natural parameter ``eta_i`` is an affine
function of the flat unconstrained parameter ``theta``:

- ``Bernoulli(logits=eta)`` -> ``"logistic"``; ``Bernoulli(probs=p)`` -> ``"logistic"`` if ``logit(p)`` is affine,
  ``"probit"`` if ``Phi^-1(p)`` is; ``Poisson(rate)`` -> ``"poisson"`` with ``eta = log rate``;
  ``Normal(loc, scale)`` -> ``"gaussian"`` and ``StudentT(df, loc, scale)`` -> ``"student_t"`` with ``eta = loc``
  and ``scale`` (and ``df``) the same for every row and every ``theta`` (a sampled ``sigma`` has no bounds here).
  The probit's log-likelihood is then computed with ``log_ndtr``: NumPyro's, through ``probs`` in float32, saturates
  near -15.9 beyond ``|eta| > 5.5``; the recognised model is the probit likelihood itself there.

How, numerically rather than by reading the source: ``X = d eta / d theta`` at ``theta = 0`` and ``o = eta(0)``, row
by row in one streamed pass (``jax.jacfwd`` of the model rerun on a chunk of rows); the affine identity
``eta(theta) = X theta + o`` is then checked to rounding at random points (every row at one, a probe of rows at
several), and the converted log-likelihood is checked against NumPyro's own on the probe. Any mismatch, and the model
stays as ``from_numpyro`` makes it otherwise. A non-zero ``o`` is a Poisson offset (``GLMSpec(offset=True)``), or
for the location families a shift of ``y``; a Bernoulli model with an offset is not recognised.

The recognised model samples the same posterior on the flat ``theta`` (``ravel_pytree`` of the latent sites; its
``log_lik`` takes the dict too) with data ``{"x": X, "y": y}`` (and ``"offset"``) in place of the model's arguments
(``X`` is a new array of ``N d`` floats); ``Model.constrain`` still reports the named constrained sites.
A model with a latent site in a plate other than the data plate (group effects ``u[g]``, a mixed model) is not made a
GLM, even where centred effects make ``eta`` linear: its design would be dense in the ``G`` levels and its Laplace
whitening poor where groups have few rows (a funnel). A warning names the sites and the route to the GLMM machinery,
``mm.glmm`` with a formula (or ``models.glmm.glmm_model``).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.scipy.special import gammaln, log_ndtr, logit, ndtri

from minibatch_mcmc.interop.numpyro_sites import Layout
from minibatch_mcmc.models.base import GLMSpec

CHUNK = 16384
"""Rows per jitted chunk of the recognition pass."""
MAX_CELLS = 2**28
"""Largest ``N d`` of the design ``X`` a recognised GLM may hold in memory (1 GiB of float32)."""
MAX_DIM = 1024
"""Largest number of parameters of a recognised GLM (beyond it the dense Laplace factor of the bounds is the cost)."""
PROBE_ROWS = 64
"""Rows at each end of the data on which the affine identity and the log-likelihood are checked at several points."""
PROBE_POINTS = 3
"""Random points of that check (plus one on every row)."""
RTOL = 1e-4
"""Relative tolerance of the checks (float32 rounding of ``X theta`` is ~1e-6 of the sum of its terms' sizes)."""


class GLMForm(NamedTuple):
    """A NumPyro model recognised as a GLM: its spec, data, and the row log-likelihood on them."""

    spec: GLMSpec
    data: dict
    """``{"x": (N, d), "y": (N,)}`` and ``"offset"`` (N,) for a Poisson offset."""
    log_lik: Callable[[jax.Array, dict], jax.Array]
    """``(flat theta, batch) -> (b,)``: NumPyro's per-row log-likelihood, through ``eta = x . theta (+ offset)``."""
    site: str
    line: str
    """What was recognised, one line."""


def unwrap(fn):
    """The distribution under any ``expand`` (a plate broadcasting it)."""
    while type(fn).__name__ == "ExpandedDistribution":
        fn = fn.base_dist
    return fn


def candidates(fn) -> dict[str, Callable]:
    """``{family: fn -> (eta, fixed parameters)}`` for the distribution ``fn`` (empty: no GLM family)."""
    name = type(unwrap(fn)).__name__
    table = {
        "Poisson": {"poisson": lambda d: (jnp.log(d.rate), {})},
        "BernoulliLogits": {"logistic": lambda d: (d.logits, {})},
        "BernoulliProbs": {"logistic": lambda d: (logit(d.probs), {}), "probit": lambda d: (ndtri(d.probs), {})},
        "Normal": {"gaussian": lambda d: (d.loc, {"scale": d.scale})},
        "StudentT": {"student_t": lambda d: (d.loc, {"scale": d.scale, "df": d.df})},
    }
    return {family: (lambda d, f=f: f(unwrap(d))) for family, f in table.get(name, {}).items()}


def row_log_density(family: str, fixed: dict) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``(eta, y) -> (b,)``: the family's log-density of each row, normalised as NumPyro's."""
    import numpyro.distributions as dist

    if family == "logistic":
        return lambda eta, y: y * eta - jax.nn.softplus(eta)
    if family == "probit":
        return lambda eta, y: log_ndtr((2.0 * y - 1.0) * eta)
    if family == "poisson":
        return lambda eta, y: y * eta - jnp.exp(eta) - gammaln(y + 1.0)
    if family == "gaussian":
        return lambda eta, y: dist.Normal(eta, fixed["scale"]).log_prob(y)
    return lambda eta, y: dist.StudentT(fixed["df"], eta, fixed["scale"]).log_prob(y)


def glm_log_lik(family: str, fixed: dict) -> Callable[[jax.Array, dict], jax.Array]:
    """``(flat theta, batch) -> (b,)`` on the GLM data."""
    density = row_log_density(family, fixed)

    def log_lik(theta: jax.Array, batch: dict) -> jax.Array:
        eta = batch["x"] @ theta
        if "offset" in batch:
            eta = eta + batch["offset"].astype(eta.dtype)
        return density(eta, batch["y"].astype(eta.dtype))

    return log_lik


def probe_index(n: int) -> np.ndarray:
    """The first and last ``PROBE_ROWS`` rows' indices (all rows if fewer)."""
    return np.unique(np.r_[np.arange(min(n, PROBE_ROWS)), np.arange(max(0, n - PROBE_ROWS), n)])


def probe(data: dict, n: int) -> dict:
    """The first and last ``PROBE_ROWS`` rows (all rows if fewer), gathered in one compiled function."""
    idx = probe_index(n)
    return jax.jit(lambda rows: jax.tree_util.tree_map(lambda a: a[idx], rows))(data)


def affine_gap(eta: jax.Array, x: jax.Array, o: jax.Array, theta: jax.Array) -> jax.Array:
    """How far ``eta`` is from ``x theta + o``, in units of the tolerance (> 1: not affine)."""
    size = jnp.abs(x) @ jnp.abs(theta) + jnp.abs(o) + 1.0
    return jnp.max(jnp.abs(eta - (x @ theta + o)) / (RTOL * size))


def group_sites(trace: dict, layout: Layout) -> dict[str, tuple[str, int]]:
    """Latent sites in a plate other than the data plates: ``{site: (plate, size)}`` (group effects ``u[g]``)."""
    out = {}
    for name in layout.latent:
        frames = [f for f in trace[name]["cond_indep_stack"] if f.name not in layout.plates]
        if frames:
            out[name] = (frames[0].name, int(frames[0].size))
    return out


def glmm_message(groups: dict) -> str:
    """What a user with a mixed model (``u[g]``) should declare to reach the GLMM machinery."""
    listing = ", ".join(f"{s!r} (plate {p!r}, {g} levels)" for s, (p, g) in sorted(groups.items()))
    return (
        f"from_numpyro: the latent sites {listing} are group effects (a mixed model): from_numpyro samples it as a "
        "general model (a dense Taylor proxy in all the parameters, the penalty test). If its likelihood is a GLMM, "
        "y ~ family(x . beta + z . u[g]), fit it with mm.glmm('y ~ x1 + ... + (1 | g)', data=df, family=...) (or "
        "models.glmm.glmm_model): a proxy in predictor space with O(G) memory, and the exact tests' bounds"
    )


def design_pass(eta_of: Callable, data: dict, n: int, d: int, key: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``X`` (N, d), ``o`` (N,) and the largest affine gap at one random point (``jax.random.key(key)``'s normal draw),
    chunk by chunk over every row."""

    @jax.jit
    def chunk(rows):
        zero, point = jnp.zeros(d), jax.random.normal(jax.random.key(key), (d,))
        x = jax.jacfwd(lambda th: eta_of(th, rows))(zero)
        o = eta_of(zero, rows)
        return x, o, affine_gap(eta_of(point, rows), x, o, point)

    xs, os, gap = [], [], 0.0
    for s in range(0, n, CHUNK):
        x, o, g = chunk(jax.tree_util.tree_map(lambda a: a[s : s + CHUNK], data))
        xs.append(np.asarray(x, np.float32))
        os.append(np.asarray(o, np.float32))
        gap = max(gap, float(g))
    return np.concatenate(xs), np.concatenate(os), gap


def split_fixed(fixed: dict, held: dict) -> dict:
    """The traced values of a family's fixed parameters; ``held`` gets every name in order, with the constant ones' values
    (NumPy, Python: as they are, not rounded to a compiled output's dtype) and None for the traced ones."""
    held.update({k: None if isinstance(v, jax.Array) else np.asarray(v) for k, v in fixed.items()})
    return {k: v for k, v in fixed.items() if isinstance(v, jax.Array)}


def probe_checks(read: Callable, eta_of: Callable, rows: dict, points: list, d: int) -> tuple[list, dict, list]:
    """At the probe ``rows``, one compiled function: the affine gap at each point (``x``, ``o`` at zero) and the family's
    fixed parameters at zero and at each point (NumPy arrays)."""
    held: list[dict] = [{} for _ in range(len(points) + 1)]

    @jax.jit
    def checks(rows, points):
        zero = jnp.zeros(d)
        x = jax.jacfwd(lambda th: eta_of(th, rows))(zero)
        o = eta_of(zero, rows)
        gaps = [affine_gap(eta_of(p, rows), x, o, p) for p in points]
        return gaps, [split_fixed(read(th, rows)[1], h) for th, h in zip([zero, *points], held)]

    gaps, fixed = checks(rows, points)
    fixed = [{k: np.asarray(f[k]) if c is None else c for k, c in h.items()} for f, h in zip(fixed, held)]
    return [float(g) for g in gaps], fixed[0], fixed[1:]


def recognise_glm(
    site_at: Callable, site_log_lik: Callable, data: dict, init: dict, layout: Layout, trace: dict
) -> tuple[GLMForm | None, str]:
    """``(GLMForm, "")`` if the model is a GLM in its flat unconstrained parameters, else ``(None, why not)``.

    Args:
        site_at: ``(params dict, rows) -> the observed site's trace entry`` at unconstrained ``params``.
        site_log_lik: ``from_numpyro``'s ``(theta, rows) -> {observed site: (b,)}``.
        data: the model's data rows.
        init: the unconstrained start (its structure sets the flat order).
        layout: the model's layout.
        trace: one trace of the model on the full data.
    """
    if len(layout.observed) != 1:
        return None, f"{len(layout.observed)} observed sites (a GLM has one)"
    site = layout.observed[0]
    entry = trace[site]
    if entry["scale"] is not None or entry.get("mask") is not None or np.ndim(entry["value"]) != 1:
        return None, f"the observed site {site!r} is scaled, masked or has more than one value per row"
    families = candidates(entry["fn"])
    if not families:
        return None, f"the observed site {site!r} is a {type(unwrap(entry['fn'])).__name__}, not a family with bounds"
    flat0, unravel = ravel_pytree(init)
    d, n = int(flat0.size), layout.n
    if d > MAX_DIM or n * d > MAX_CELLS:
        return (
            None,
            f"d = {d} parameters over N = {n} rows is past the dense design's limits (d <= {MAX_DIM}, N d <= {MAX_CELLS})",
        )
    rows = probe(data, n)
    rng = np.random.default_rng(0)
    points = [jnp.asarray(np.asarray(flat0) + rng.standard_normal(d), flat0.dtype) for _ in range(PROBE_POINTS)]
    why = "eta is not affine in the parameters"
    for family, natural in families.items():
        form, why = try_family(family, natural, site, site_at, site_log_lik, unravel, data, rows, points, layout)
        if form is not None:
            return form, ""
    return None, why


def try_family(
    family, natural, site, site_at, site_log_lik, unravel, data, rows, points, layout
) -> tuple[GLMForm | None, str]:
    """The ``GLMForm`` of ``family`` if the checks hold, else ``(None, why not)``."""
    d = int(points[0].size)

    def read(theta, batch):
        return natural(site_at(unravel(theta), batch)["fn"])

    def eta_of(theta, batch):
        b = int(jax.tree_util.tree_leaves(batch)[0].shape[0])
        return jnp.broadcast_to(read(theta, batch)[0], (b,))

    gaps, fixed, moved_at = probe_checks(read, eta_of, rows, points, d)
    if max(gaps) > 1.0:
        return None, f"eta of the observed site {site!r} ({family}) is not affine in the unconstrained parameters"
    for moved in moved_at:
        if any(
            not np.allclose(moved[k], fixed[k], rtol=1e-6) or np.ptp(fixed[k]) > 1e-6 * np.abs(fixed[k]).max()
            for k in fixed
        ):
            return (
                None,
                f"the {family} family's {sorted(fixed)} vary with the parameters or the rows (the bounds need them fixed)",
            )
    fixed = {k: float(np.ravel(v)[0]) for k, v in fixed.items()}
    x, o, gap = design_pass(eta_of, data, layout.n, d, 1)
    if gap > 1.0:
        return None, f"eta of the observed site {site!r} ({family}) is not affine in the parameters on every row"
    y = np.asarray(jax.jit(lambda rows: site_at(unravel(jnp.zeros(d)), rows)["value"])(data), np.float32)
    offset = bool(np.any(np.abs(o) > RTOL * (1.0 + np.abs(o).max())))
    if offset and family in ("logistic", "probit"):
        return None, f"the {family} predictor has an offset (eta(0) != 0), which its bounds do not cover"
    glm_data = {"x": x, "y": y}
    if offset and family == "poisson":
        glm_data["offset"] = o
    elif offset:  # a location family: the offset moves y
        glm_data["y"] = y - o
    log_lik = glm_log_lik(family, fixed)
    idx = probe_index(layout.n)
    pairs = jax.jit(
        lambda points, probe_glm, rows: [(log_lik(p, probe_glm), site_log_lik(p, rows)[site]) for p in points]
    )(points, {k: v[idx] for k, v in glm_data.items()}, rows)
    for ours, theirs in pairs:
        ours, theirs = np.asarray(ours), np.asarray(theirs)
        if (
            family == "probit"
        ):  # NumPyro's float32 ``1 - probs`` loses digits below log-density -7; ``log_ndtr`` does not
            ours, theirs = ours[theirs > -7.0], theirs[theirs > -7.0]
        if not np.allclose(ours, theirs, rtol=RTOL, atol=RTOL * (1.0 + np.abs(theirs).max())):
            return None, f"the {family} log-likelihood through eta does not match the observed site {site!r}'s"
    glm_data = {k: jnp.asarray(v) for k, v in glm_data.items()}
    spec = GLMSpec(
        family,
        precision=fixed.get("scale", 1.0) ** -2 if fixed else 1.0,
        offset=offset and family == "poisson",
        nu=fixed.get("df", 1.0),
        exact_default=True,
    )
    extra = ", ".join([f"{k} = {v:.4g}" for k, v in fixed.items()] + (["offset"] if offset else []))
    line = (
        f"from_numpyro: recognised a {family} GLM (site {site!r}, eta linear in the {d} unconstrained parameters"
        f"{', ' + extra if extra else ''}): the exact tests' per-datum bounds apply"
    )
    return GLMForm(spec, glm_data, log_lik, site, line), ""


def as_glm(converted: Any, trace_at: Callable, trace: dict) -> Any:
    """``converted`` on a flat ``theta`` with data ``{"x", "y"}`` and ``Model.glm`` set where the model is recognised as a
    GLM (``interop.numpyro_glm``: a line says so), else as it is (a warning naming ``mm.glmm`` for an unrecognised ``u[g]``)."""
    layout = converted.layout
    site, groups = layout.observed[0], group_sites(trace, layout)
    if groups:  # a mixed model: the GLMM machinery's, not a dense GLM's
        warnings.warn(glmm_message(groups), stacklevel=4)
        return converted
    form, _ = recognise_glm(
        lambda params, rows: trace_at(params, rows)[site],
        converted.site_log_lik,
        converted.data,
        converted.init,
        layout,
        trace,
    )
    if form is None:
        return converted
    print(form.line, flush=True)

    def log_lik(theta: Any, batch: dict) -> jax.Array:
        return form.log_lik(ravel_pytree(theta)[0] if isinstance(theta, dict) else theta, batch)

    return converted._replace(
        model=converted.model._replace(log_lik=log_lik, glm=form.spec),
        data=form.data,
        init=ravel_pytree(converted.init)[0],
        site_log_lik=lambda theta, batch: {site: log_lik(theta, batch)},
        layout=layout._replace(data_names=tuple(form.data)),
    )

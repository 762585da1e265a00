"""The location ridge of ``warmup.group_gibbs``'s sweep (issue 31): its pairs, and step 4's partial centring in location.

A location pair ``(j, f, l)`` is a fixed column ``x_j`` equal to factor ``f``'s effect column ``z_l`` on every row (the
intercept and ``(1 | g)``): ``beta_j + d`` with ``u_{g l} - d`` leaves every ``eta_i`` unchanged (the sweep's step 2).
Step 4 moves the globals with the effects held in some coordinates; holding ``u`` itself moves every level's
``c_g = beta_j + u_{g l}`` with ``beta_j``, and a level of many rows pins its ``c_g``, so the step in ``beta_j`` is held
by that level's data. With per-level location weights ``w_g`` step 4 instead holds ``a = (u_{g l} + w_g beta_j)
e^{-v s}``: a move ``beta_j + d`` takes ``u_{g l} - w_g d``, so ``c_g`` moves by ``(1 - w_g) d``. ``w_g = 1 - v_g`` (the
data's share of the effect's conditional precision, ``v_g`` the prior's, ``group_gibbs.spread_weights``) is
Papaspiliopoulos, Roberts and Skold's partial non-centring in location: for a Gaussian level, ``u_g + w_g beta_j`` is
independent of ``beta_j`` given the rest, so a heavy level's ``c_g`` stays where its data pin it while a light level's
moves with the intercept. ``w = 0`` is the move as it was. The map ``(x, a) -> (x, u)``, ``u = a e^{v s} - w beta_j``,
is triangular (``u`` shifted by a function of the globals ``x`` alone), so its Jacobian is still ``prod e^{v s}``, and
``eta_i``'s derivative in ``beta_j`` becomes ``x_ij - w_{g(i)} z_{i l}``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.models.base import GLMMLayout


def location_pairs(layout: GLMMLayout, data: dict) -> tuple:
    """The pairs ``(j, f, l)``: fixed column ``j`` equal to factor ``f``'s column ``l`` on every row (numpy)."""
    x = np.asarray(data["x"])
    pairs = []
    for f, k in enumerate(layout.columns):
        z = np.asarray(data[f"z_{f}"])
        for l in range(k):
            same = [j for j in range(x.shape[1]) if np.array_equal(x[:, j], z[:, l])]
            if same:
                pairs.append((same[0], f, l))
    return tuple(pairs)


def location_weights(pairs: tuple, spread: tuple) -> tuple:
    """Per factor the ``(..., G_f, k_f)`` location weights for the spread weights ``v``: ``w = 1 - v`` on each pair's
    effect column, 0 on the others (any leading axes, e.g. chains)."""
    out = []
    for f, v in enumerate(spread):
        v = jnp.asarray(v)
        paired = np.zeros(v.shape[-1], bool)
        paired[[l for _, ff, l in pairs if ff == f]] = True
        out.append(jnp.where(paired, 1.0 - v, jnp.zeros_like(v)))
    return tuple(out)


def anchored(pairs: tuple, location: tuple, beta: jax.Array, us: tuple, sign: float = 1.0) -> tuple:
    """Each factor's effects plus ``sign * w_g beta_j`` on each pair ``(j, f, l)``'s column ``l`` (``location``
    empty: ``us`` as they are)."""
    if not location:
        return us
    out = list(us)
    for j, f, l in pairs:
        w = jnp.asarray(location[f][:, l], out[f].dtype)
        out[f] = out[f].at[:, l].add(sign * w * beta[j])
    return tuple(out)


def fixed_jacobian(pairs: tuple, location: tuple, rows: dict, dtype) -> jax.Array:
    """Each row's ``d eta_i / d beta`` with the anchored effects held: ``x_ij - w_{g(i)} z_{i l}`` on each pair's
    column ``j``, ``x_ij`` elsewhere (``location`` empty: ``x``)."""
    x = rows["x"].astype(dtype)
    if not location:
        return x
    for j, f, l in pairs:
        w = jnp.asarray(location[f][:, l], dtype)[rows[f"g_{f}"]]
        x = x.at[:, j].add(-w * rows[f"z_{f}"][:, l].astype(dtype))
    return x

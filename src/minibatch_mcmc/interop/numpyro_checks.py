"""``from_numpyro``'s checks on what the start's compiled function read (``numpyro_start.start_and_checks``): a prior
that reads the data rows, an observed site that cannot be read on two rows, deterministic sites that change with the
row, and, for a model with no finite start, the first observed site and row whose log-likelihood is not finite. Each
error or warning names the sites and arguments."""

from __future__ import annotations

import warnings
from typing import Callable

import jax
import numpy as np

from minibatch_mcmc.interop.numpyro_sites import Layout


def steady_deterministic(values: tuple[dict, dict], layout: Layout) -> tuple[str, ...]:
    """The deterministic sites that do not change with the data row they are computed on (``values``: on the first and
    last row); a warning names the others."""
    first, other = values
    moved = [k for k in layout.deterministic if not np.allclose(first[k], other[k], rtol=1e-5, atol=1e-6)]
    if moved:
        warnings.warn(
            f"deterministic sites {moved} read the data arguments {list(layout.data_names)} outside the data plate(s) "
            f"{list(layout.plates)}: they are not recorded (the draws are reported on one data row); compute them "
            "from the draws, or pass data summaries as separate arguments",
            stacklevel=3,
        )
    return tuple(k for k in layout.deterministic if k not in moved)


def check_prior_is_data_free(values: tuple[dict, dict], layout: Layout) -> None:
    """Raise a ``ValueError`` naming the sites outside the plate whose log-density changes with the data row (``values``:
    each site's log-density on the first and last row)."""
    first, other = values
    moved = sorted(k for k in first if not np.isclose(first[k], other.get(k, np.nan), rtol=1e-5, atol=1e-6))
    if moved:
        raise ValueError(
            f"sites {moved} outside the data plate(s) {list(layout.plates)} read the data arguments "
            f"{list(layout.data_names)}: the prior must not depend on the data rows (it is evaluated on one row); "
            "pass data summaries (e.g. a scale computed from y) as separate arguments"
        )


def check_likelihood(values: dict, error: str, layout: Layout) -> None:
    """Raise a ``ValueError`` naming the sites and arguments if the likelihood on two rows failed (``error``) or has
    another shape (``values``)."""
    b = min(2, layout.n)
    bad = {"error": error} if error else {k: tuple(v.shape) for k, v in values.items() if v.shape != (b,)}
    if bad:
        raise ValueError(
            f"the observed sites {list(layout.observed)} could not be read on {b} rows of the data arguments "
            f"{list(layout.data_names)} ({bad}): their observations must come in through those arguments "
            f"(rows on axis 0, N={layout.n}), not through a closure"
        )


def no_start_error(site_log_lik: Callable, data: dict, init: dict, layout: Layout, chunk: int = 65536) -> ValueError:
    """The error for a model with no finite start, naming the first observed site and row whose log-likelihood is
    non-finite at NumPyro's (invalid) start: a value outside the site's support, e.g. a negative count."""
    where = ""
    for start in range(0, layout.n, chunk):
        rows = jax.tree_util.tree_map(lambda a: a[start : start + chunk], data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # NumPyro's out-of-support warning: the row is named below
            values = site_log_lik(init, rows)
        bad = [(name, np.flatnonzero(~np.isfinite(np.asarray(v)))) for name, v in values.items()]
        bad = [(name, start + int(i[0])) for name, i in bad if i.size]
        if bad:
            name, row = min(bad, key=lambda b: b[1])
            value = {k: np.asarray(v[row]).tolist() for k, v in data.items()}
            where = (
                f": the observed site {name!r} has a non-finite log-likelihood at row {row} (data {value}); "
                "check that row against the site's distribution and support"
            )
            break
    return ValueError(
        f"NumPyro found no start with a finite log density and gradient for the latent sites {list(layout.latent)}{where}"
    )

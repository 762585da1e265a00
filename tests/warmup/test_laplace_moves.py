"""The rule that picks the warm-up's proposal when the user names none, from what the warm-up found."""

from minibatch_mcmc.warmup.laplace_moves import DEFAULT_PROPOSAL, GUARDED_PROPOSAL, default_kind


def test_rule_guards_a_stratum_or_several_modes_and_keeps_proxy_hmc_otherwise():
    """Proxy HMC where the warm-up saw one mode and no rows the proxy cannot see (also with the multi-start search off,
    no modes listed); the mixture with a random walk where it built an exact stratum, found several modes, or both, the
    reason naming what it saw. A rule that ignored either sign, or guarded the ordinary fit, fails here."""
    assert DEFAULT_PROPOSAL == "proxy_hmc" and GUARDED_PROPOSAL == "mixture"
    assert default_kind(0, 1) == ("proxy_hmc", "rule: no exact stratum, one mode")
    assert default_kind(0, 0) == ("proxy_hmc", "rule: no exact stratum, one mode")
    assert default_kind(5, 1) == ("mixture", "rule: an exact stratum of 5 rows")
    assert default_kind(0, 2) == ("mixture", "rule: 2 modes")
    assert default_kind(20, 3) == ("mixture", "rule: an exact stratum of 20 rows and 3 modes")


def _fit():
    """A Taylor proxy of the 2-d Gaussian mean on 40 rows, at its mode, and a Laplace factor."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from minibatch_mcmc.control_variates import taylor_proxy
    from minibatch_mcmc.models import gaussian_mean

    data = jax.random.normal(jax.random.key(0), (40, 2), jnp.float32) + jnp.asarray([0.5, -1.0])
    model = gaussian_mean()
    return model, taylor_proxy(model, data, jnp.mean(data, axis=0)), np.array([[0.16, 0.0], [0.02, 0.15]])


def test_an_unknown_kind_is_an_error_naming_the_kinds():
    """``proposal_for`` (and the tuning's ``tuned_steps`` and first scale) refuse a kind with no row, listing the rows;
    before the registry a name missing from ``proposal_for`` silently became the proxy-gradient MALA."""
    import numpy as np
    import pytest

    from minibatch_mcmc.warmup.laplace_moves import proposal_for, tuned_steps
    from minibatch_mcmc.warmup.tuning import initial_scale

    chol = np.eye(2)  # the check comes before anything is built: no proxy or model needed
    known = "'langevin', 'random_walk', 'independence', 'independence_t', 'proxy_hmc', 'mixture'"
    with pytest.raises(ValueError, match=f"proposal='nonsense' must be one of {known}$"):
        proposal_for("nonsense", None, None, chol, 1.0, "metropolis")
    with pytest.raises(ValueError, match=f"proposal='nonsense' must be one of {known}$"):
        tuned_steps("nonsense")
    with pytest.raises(ValueError, match=f"proposal='nonsense' must be one of {known}$"):
        initial_scale("nonsense", 4)
    with pytest.raises(ValueError, match="proposal 'proxy_hmc' is not tuned"):
        initial_scale("proxy_hmc", 4)


def test_every_kind_builds_and_declares_how_it_is_tuned():
    """Each row builds a data-free ``Proposal`` under both rules (their draws are tested in tests/proposals and
    test_proxy_moves.py); its declarations agree with each other
    and with what the warm-up needs: a tuned kind's move is a tuned row with targets under both rules and a positive first
    scale (the random walk's ``2.38 / sqrt(d)``, MALA's ``1.65^2 d^(-1/3)``, written out here), the global kinds
    declare none, ``mixture`` tunes the random walk on some steps only, and ``warmup.PROPOSALS`` is the rows and ``auto``."""
    import math

    from minibatch_mcmc.proposals.base import Proposal
    from minibatch_mcmc.warmup import AUTO_CANDIDATES, PROPOSALS
    from minibatch_mcmc.warmup.laplace_moves import GLOBAL, KINDS, TARGET_ACCEPT, proposal_for, tuned_steps
    from minibatch_mcmc.warmup.tuning import initial_scale

    model, proxy, chol = _fit()
    for name, kind in KINDS.items():
        assert kind.name == name
        for rule in ("metropolis", "barker"):
            proposal = proposal_for(name, proxy, model, chol, 1.0, rule)(0.3)
            assert isinstance(proposal, Proposal) and proposal.gradient_batch_size is None, (
                name
            )  # all moves are data-free
            if kind.is_global:
                assert kind.target is None and kind.initial_scale is None, name
            else:
                tuned = KINDS[kind.tuned_move]
                assert tuned.tuned_move == tuned.name and (rule, kind.target) in TARGET_ACCEPT, name
                assert kind.target == tuned.target and kind.initial_scale is tuned.initial_scale, name
    assert GLOBAL == ("independence", "independence_t", "proxy_hmc") and set(AUTO_CANDIDATES) <= set(GLOBAL)
    assert PROPOSALS == tuple(KINDS) + ("auto",)
    assert [KINDS[k].tuned_move for k in ("langevin", "random_walk", "mixture")] == [
        "langevin",
        "random_walk",
        "random_walk",
    ]
    assert initial_scale("random_walk", 4) == 2.38 / 2 == initial_scale("mixture", 4)
    assert math.isclose(initial_scale("langevin", 8), 1.65**2 / 2)
    assert tuned_steps("langevin") is None and tuned_steps("random_walk") is None
    assert callable(tuned_steps("mixture"))

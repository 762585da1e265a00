"""The rule that picks the warm-up's proposal when the user names none, from what the warm-up found."""

from minibatch_mcmc.control_variates.laplace_moves import DEFAULT_PROPOSAL, GUARDED_PROPOSAL, default_kind


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

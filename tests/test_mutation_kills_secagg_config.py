"""``SecureAggregation`` (``federation/secagg/config.py``), in process: what a configuration may
hold, the threshold it resolves to (a strict majority, never above ``N``), the graph's degree,
and a ring the sum of every participant's input cannot wrap (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from optuna_fedbo.core.secagg.graph import choose_degree
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.federation.secagg import config as config_module
from optuna_fedbo.federation.secagg.config import SecureAggregation
from optuna_fedbo.federation.secagg.config import stored_secure_aggregation


def test_the_defaults_and_the_smallest_valid_values_are_accepted_as_floats() -> None:
    config = SecureAggregation()
    assert (config.threshold, config.max_observations, config.degree) == (None, 1000, None)
    assert (config.step, config.step_timeout) == (2.0**-20, 10.0)
    small = SecureAggregation(threshold=3, max_observations=1, step=1, step_timeout=0, degree=2)
    assert (small.step, small.step_timeout) == (1.0, 0.0)
    assert isinstance(small.step, float) and isinstance(small.step_timeout, float)
    assert SecureAggregation(step=math.ulp(0.0), step_timeout=0.5).step == math.ulp(0.0)
    assert SecureAggregation(degree=4).degree == 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"threshold": True}, "threshold must be an integer or None"),
        ({"threshold": 3.0}, "threshold must be an integer or None"),
        ({"max_observations": 0}, r"max_observations must be an integer in \[1, 2147483648\]"),
        ({"max_observations": True}, r"max_observations must be an integer in \[1, 2147483648\]"),
        ({"max_observations": 10.0}, r"max_observations must be an integer in \[1, 2147483648\]"),
        (
            {"max_observations": 2**31 + 1},
            r"must be an integer in \[1, 2147483648\], got 2147483649",
        ),
        ({"step": 0.0}, "step must be positive and finite"),
        ({"step": -1.0}, "step must be positive and finite"),
        ({"step": math.inf}, "step must be positive and finite"),
        ({"step": math.nan}, "step must be positive and finite"),
        ({"step": True}, "step must be a positive number"),
        ({"step": "1"}, "step must be a positive number"),
        ({"step_timeout": -1e-9}, "step_timeout must be positive and finite"),
        ({"step_timeout": math.inf}, "step_timeout must be positive and finite"),
        ({"step_timeout": False}, "step_timeout must be a positive number"),
        ({"degree": True}, "degree must be None or an even integer >= 2"),
        ({"degree": 4.0}, "degree must be None or an even integer >= 2"),
        ({"degree": 0}, "degree must be None or an even integer >= 2"),
        ({"degree": 3}, "degree must be None or an even integer >= 2"),
    ],
)
def test_a_value_outside_its_domain_is_refused(changes, message) -> None:
    with pytest.raises(ValueError, match=message):
        SecureAggregation(**changes)


def test_the_bound_holds_the_count_and_gram_of_max_observations_and_one_digit() -> None:
    digit = (2**32 - 1) * 2.0**-20  # a base-2^32 digit at the default step
    assert SecureAggregation(max_observations=7).bound == digit
    assert SecureAggregation(max_observations=5000).bound == 5000.0
    assert SecureAggregation(max_observations=7, step=1.0).bound == 2.0**32 - 1
    assert SecureAggregation(max_observations=2**31).bound == 2.0**31


@pytest.mark.parametrize(("n", "threshold"), [(3, 2), (4, 3), (5, 3), (6, 4), (7, 4)])
def test_the_default_threshold_is_the_smallest_strict_majority(n: int, threshold: int) -> None:
    resolved = SecureAggregation().resolve(n, 8)
    assert (resolved.threshold, resolved.degree) == (threshold, None)
    assert SecureAggregation(threshold=n).resolve(n, 8).threshold == n  # everyone is allowed


@pytest.mark.parametrize(
    ("n", "changes", "message"),
    [
        (2, {}, "needs at least 3 participants"),
        (4, {"threshold": 5}, "exceeds the 4 participants"),
        (4, {"threshold": 2}, "is not above N/2 = 2"),
        (5, {"threshold": 2}, "is not above N/2 = 2.5"),
        (4, {"degree": 4}, "degree 4 must be below N = 4"),
        (4, {"step": 1e-30}, "would wrap the ring"),
    ],
)
def test_a_configuration_that_does_not_fit_n_is_refused(n: int, changes, message) -> None:
    with pytest.raises(ValueError, match=message):
        SecureAggregation(**changes).resolve(n, 8)


def test_the_degree_is_kept_below_50_and_chosen_from_50_on() -> None:
    assert SecureAggregation(degree=2).resolve(4, 8).degree == 2
    assert SecureAggregation().resolve(49, 8).degree is None  # the complete graph
    chosen = SecureAggregation().resolve(50, 8).degree
    assert chosen == choose_degree(50, target=2.0**-30) == 12


def test_the_chosen_degree_meets_the_configured_failure_probability(monkeypatch) -> None:
    monkeypatch.setattr(config_module, "AUTO_DEGREE_FAILURE", 2.0**-10)  # a weaker target
    assert SecureAggregation().resolve(50, 8).degree == choose_degree(50, target=2.0**-10) == 10


def test_the_ring_holds_the_sum_of_n_inputs_at_the_bound() -> None:
    config = SecureAggregation(max_observations=3, step=0.125)
    bound = (2**32 - 1) * 0.125
    assert config.ring(5, 7) == plan_ring(n_inputs=5, bound=bound, step=0.125, dimension=7)
    assert config.resolve(5, 7).ring(5, 7) == config.ring(5, 7)


def test_the_stored_form_round_trips_and_refuses_unknown_fields() -> None:
    resolved = SecureAggregation(step=0.5).resolve(5, 8)
    assert SecureAggregation.from_dict(resolved.to_dict()) == resolved
    for record in ({**resolved.to_dict(), "extra": 1}, ["threshold"], "threshold"):
        with pytest.raises(ValueError, match="A secure aggregation record has only the fields"):
            SecureAggregation.from_dict(record)


def test_creation_stores_the_resolved_configuration_for_the_protocols_dimension() -> None:
    asked: list = []

    def check(privacy):
        asked.append(privacy)
        return 8

    protocol = SimpleNamespace(check_secure_aggregation=check)
    privacy = object()
    stored = stored_secure_aggregation(SecureAggregation(), protocol, privacy, 5)
    assert stored == SecureAggregation().resolve(5, 8).to_dict() and asked == [privacy]
    assert stored_secure_aggregation(None, protocol, privacy, 5) is None
    with pytest.raises(ValueError, match="secure_aggregation must be None or a SecureAggreg"):
        stored_secure_aggregation({"threshold": 3}, protocol, privacy, 5)
    with pytest.raises(ValueError, match="would wrap the ring"):
        stored_secure_aggregation(SecureAggregation(step=1e-17), protocol, privacy, 5)

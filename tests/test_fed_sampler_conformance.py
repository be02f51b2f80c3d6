"""Optuna's sampler conformance suite on the federated path of ``FedSampler``.

Each case gets a federation whose search space is the case's own distributions and which already
holds a published broadcast (FTS family: round 0; Fed-PNE: phase 2), with and without
differential privacy. The participant is set to use the federation at every trial it can (FTS:
no initial design; Fed-PNE: the published phase, then its best node), and after each case the
federated step must have run: the suite exercises the federated code path, not a fallback. The
FTS cases run the default participant, FedTransferSampler (the papers' FedThompsonSampler runs
the relative cases on its federated path in tests/test_federation_sampler.py).
"""

from __future__ import annotations

import itertools

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
from optuna.testing.pytest_samplers import BasicSamplerTestCase
from optuna.testing.pytest_samplers import RelativeSamplerTestCase
from optuna.testing.pytest_samplers import SingleOnlySamplerTestCase
import pytest

from optuna_fedbo import FedSampler
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FTSConfig

optuna.logging.set_verbosity(optuna.logging.ERROR)
_names = itertools.count()

#: Spaces of the suite's cases that are not parametrized by distribution.
KNOWN_SPACES: dict[str, dict[str, BaseDistribution]] = {
    "test_nan_objective_value": {"x": FloatDistribution(0.1, 0.2)},
    "test_partial_fixed_sampling": {
        "x": FloatDistribution(-1, 1),
        "y": IntDistribution(-1, 1),
        "z": FloatDistribution(-1, 1),
    },
    "test_conditional_parameter_objective": {
        "x": CategoricalDistribution([True, False]),
        "y": FloatDistribution(0, 1),
        "z": FloatDistribution(0, 1),
    },
    "test_trial_relative_params": {
        "x": FloatDistribution(-10, 10),
        "y": FloatDistribution(-10, 10),
    },
    "test_sample_relative_categorical": {
        "x": CategoricalDistribution([1, 10, 100]),
        "y": CategoricalDistribution([-1, -10, -100]),
    },
}
#: Cases whose parameters cannot all come from the federation (dynamic or degenerate spaces,
#: multi-objective refusals): the federated step is not expected there.
NOT_FEDERATED = {
    "test_conditional_sample_independent",
    "test_dynamic_range_objective",
    "test_sample_single_distribution",
    "test_raise_error_for_samplers_during_multi_objectives",
}
OUTSIDE = {"fed_u": FloatDistribution(0.0, 1.0)}


def _probe(suggest) -> BaseDistribution:
    trial = optuna.create_study().ask()
    suggest(trial)
    return next(iter(trial.distributions.values()))


def _case_space(request: pytest.FixtureRequest) -> dict[str, BaseDistribution] | None:
    """The distributions the case will suggest, or ``None`` if they cannot be known."""
    name = request.node.originalname
    if name in NOT_FEDERATED:
        return None
    params = request.node.callspec.params if hasattr(request.node, "callspec") else {}
    space: dict[str, BaseDistribution] = {}
    for key, param in (("distribution", "x"), ("x_distribution", "x"), ("y_distribution", "y")):
        if key in params:
            space[param] = params[key]
    if "choices" in params:
        space["x"] = CategoricalDistribution(params["choices"])
    for key, param in (("suggest_method_x", "x"), ("suggest_method_y", "y")):
        if key in params:
            space[param] = _probe(params[key])
    space = space or KNOWN_SPACES.get(name, {})
    if not space or all(d.single() for d in space.values()):
        return None
    return space


def _fts_federation(space, private: bool) -> Federation:
    fed = Federation.create(
        f"conf-{next(_names)}",
        search_space=space,
        n_clients=2,
        protocol=FTSConfig(n_features=16, n_init=0, min_contributors=1),  # the peer alone
        privacy=DPConfig(1.0, 1.0, 5.0) if private else None,
        seed=0,
    )
    fed.join("peer")
    rng = np.random.default_rng(0)
    if fed.fts.aggregation == "pooled":  # the peer's statistics of three trials
        x, y = rng.uniform(size=(3, fed.encoder.n_columns)), rng.normal(size=3)
        blocks = []
        for features in fed.pooling_features():
            blocks.append(SufficientStatistics(features.n_features))
            blocks[-1].add(features(x), y)
        upload = pack_blocks(blocks)
    else:
        upload = rng.normal(size=16)
    fed.upload("peer", upload, n_observations=3, iteration=1)
    assert FederationServer(fed).step(force=True) is not None  # broadcast 0 is published
    return fed


def _fedpne_federation(space, private: bool) -> Federation:
    config = FedPNEConfig(
        horizon=200, **({"dp_epsilon": 1.0, "dp_delta": 0.01} if private else {})
    )
    fed = Federation.create(
        f"conf-{next(_names)}", search_space=space, n_clients=2, protocol=config, seed=0
    )
    fed.join("peer")
    channel = fed.channel
    phase = channel.view().phase
    assert channel.upload("peer", phase, {node.key: 0.5 for node in phase.nodes})
    assert FederationServer(fed).step(force=True) is not None  # phase 2 is published
    return fed


def _conformance_sampler(request, make_federation, **kwargs):
    space = _case_space(request)
    expected = space is not None
    made: list[FedSampler] = []

    def make() -> FedSampler:
        fed = make_federation(space if expected else OUTSIDE)
        sampler = FedSampler(
            fed, client_id="solo", seed=0, warn_independent_sampling=False, **kwargs
        )
        made.append(sampler)
        return sampler

    yield make
    if expected:
        assert sum(s.counts.federated for s in made) > 0, "the federated step never ran"


class _FTSCases(BasicSamplerTestCase, RelativeSamplerTestCase, SingleOnlySamplerTestCase):
    private = False

    @pytest.fixture
    def sampler(self, request):
        yield from _conformance_sampler(
            request,
            lambda space: _fts_federation(space, self.private),
            n_candidates=32,
            n_refinements=1,
        )


class TestFTSConformance(_FTSCases):
    private = False


class TestDPFTSConformance(_FTSCases):
    private = True


class _FedPNECases(BasicSamplerTestCase, SingleOnlySamplerTestCase):
    private = False

    @pytest.fixture
    def sampler(self, request):
        yield from _conformance_sampler(
            request,
            lambda space: _fedpne_federation(space, self.private),
            phase_timeout=0.0,  # pulls done: the published best node, at once
            on_timeout="best",
        )


class TestFedPNEConformance(_FedPNECases):
    private = False


class TestDPFedPNEConformance(_FedPNECases):
    private = True

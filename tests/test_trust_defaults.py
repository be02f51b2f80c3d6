"""Safe defaults: a meaningful delta, a clear error for delta >= 1/N, the papers' weak delta only
in the paper preset (with a warning); robust aggregation without DP; overflow-safe clipping."""

from __future__ import annotations

import itertools

import numpy as np
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.core.influence import vector_norm_bound
from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import presets
from optuna_fedbo.federation.dp_config import PAPER_DELTA
from optuna_fedbo.federation.fts.messages import encode_upload
from optuna_fedbo.privacy._gaussian import clip_to_norm

SPACE = {"x": FloatDistribution(0.0, 1.0)}
M = 5
_names = itertools.count()


@pytest.mark.parametrize("n_clients", [2, 4, 29, 200, 10_000])
def test_the_default_delta_is_well_below_one_over_n(n_clients: int) -> None:
    delta = DPConfig(1.0, 0.5, 1.0).resolve(n_clients).delta
    assert delta == min(1e-5, 0.01 / n_clients) and delta <= 0.01 / n_clients
    assert DPConfig(1.0, 0.5, 1.0).weakness(n_clients) is None


def test_delta_at_least_one_over_n_is_refused() -> None:
    with pytest.raises(ValueError, match=r"at least 1/N = 0.25: no guarantee"):
        DPConfig(1.0, 0.5, 1.0, delta=0.3).resolve(4)
    with pytest.raises(ValueError, match="no guarantee"):
        Federation.create(
            "weak", search_space=SPACE, n_clients=4, privacy=DPConfig(1.0, 0.5, 1.0, delta=0.25)
        )


def test_the_papers_delta_stays_in_the_paper_preset_with_a_warning() -> None:
    privacy = presets.dp_fts_de_privacy()
    assert privacy.delta == PAPER_DELTA
    assert privacy.resolve(29).delta == pytest.approx(29**-1.1)
    with pytest.warns(UserWarning, match="weak guarantee.*papers' 1/N\\^1.1"):
        fed = Federation.create(
            f"paper-{next(_names)}",
            search_space=SPACE,
            n_clients=4,
            protocol=presets.dp_fts_de(n_subregions=1),
            privacy=privacy,
        )
    assert fed.privacy.delta == pytest.approx(4**-1.1)  # 0.218: kept, but said to be weak


def test_a_four_site_dp_federation_reports_a_real_epsilon() -> None:
    fed = Federation.create(
        f"four-{next(_names)}",
        search_space=SPACE,
        n_clients=4,
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
        privacy=DPConfig(1.0, 0.5, 3.0),
    )
    assert fed.privacy.epsilon(1, 4) > 0.1  # with delta 0.22 it was reported as 0


def _federation(n_clients: int) -> Federation:
    fed = Federation.create(
        f"robust-{next(_names)}",
        search_space=SPACE,
        n_clients=n_clients,
        protocol=FTSConfig(n_features=M, n_init=1, aggregation="weighted"),
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def test_without_dp_an_absurd_vector_is_refused_and_a_huge_one_clipped() -> None:
    fed = _federation(4)
    server = FederationServer(fed)
    honest = np.ones(M)
    for i in range(3):
        fed.upload(f"c{i}", honest * (1 + 0.1 * i), n_observations=2, iteration=0)
    payload = encode_upload(
        config_hash=fed.config_hash,
        round_index=0,
        client_id="c3",
        omega=np.full(M, 1e300),
        n_observations=2,
        iteration=0,
    )
    fed.send_upload("c3", 0, payload)
    report = server.step(force=True)
    assert "absurd value" in dict(report.rejected)["c3"]
    assert np.all(np.abs(fed.latest_broadcast().vectors) < 2)
    # A large (not absurd) poisoned vector is clipped to the model's norm bound (its share of
    # the average: a quarter of it).
    for i in range(3):
        fed.upload(f"c{i}", honest, n_observations=2, iteration=1)
    fed.upload("c3", np.full(M, 1e9), n_observations=2, iteration=1)
    server.step()
    vectors = fed.latest_broadcast().vectors
    expected = (3 * honest + np.full(M, vector_norm_bound(M) / np.sqrt(M))) / 4
    np.testing.assert_allclose(vectors[0], expected, rtol=1e-12)


def test_clipping_huge_vectors_does_not_overflow_to_zero() -> None:
    clipped = clip_to_norm(np.array([[1e300, -1e300, 0.0], [3.0, 4.0, 0.0]]), 2.0)
    np.testing.assert_allclose(clipped[0], [np.sqrt(2), -np.sqrt(2), 0.0])
    np.testing.assert_allclose(clipped[1], [1.2, 1.6, 0.0], rtol=1e-15)
    small = np.array([0.1, 0.2, 0.3])
    np.testing.assert_array_equal(clip_to_norm(small, 1.0), small)  # unchanged, bit for bit

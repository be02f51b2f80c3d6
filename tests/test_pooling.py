"""Pooled statistics (``aggregation="pooled"``, the default without DP): the math core, the
server's aggregation and checks, and the participant's upload."""

from __future__ import annotations

import logging
import math
from typing import Any

from _upload_attacks import receipt
import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.core.gp_fit import REFIT_GROWTH
from optuna_fedbo.core.pooling import _PooledSums
from optuna_fedbo.core.pooling import choose_posterior
from optuna_fedbo.core.pooling import KeptChoice
from optuna_fedbo.core.pooling import pack
from optuna_fedbo.core.pooling import pack_blocks
from optuna_fedbo.core.pooling import packed_blocks_length
from optuna_fedbo.core.pooling import pooled_posterior
from optuna_fedbo.core.pooling import pooling_feature_maps
from optuna_fedbo.core.pooling import POOLING_NOISE_VARIANCES
from optuna_fedbo.core.pooling import POOLING_OFFSET_SCALES
from optuna_fedbo.core.pooling import PoolingChoice
from optuna_fedbo.core.pooling import robust_weights
from optuna_fedbo.core.pooling import select_posterior
from optuna_fedbo.core.pooling import unpack
from optuna_fedbo.core.pooling import unpack_blocks
from optuna_fedbo.core.posterior import SufficientStatistics
from optuna_fedbo.core.rff import RandomFourierFeatures
from optuna_fedbo.federation import DPConfig
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation._codec import binary_frame
from optuna_fedbo.federation._codec import split_frame
from optuna_fedbo.federation._codec import vector_digest
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.fts.messages import encode_upload
from optuna_fedbo.federation.fts.messages import parse_upload
from optuna_fedbo.samplers import FedThompsonSampler
from optuna_fedbo.samplers import FedTransferSampler
from optuna_fedbo.samplers._fts_upload import UploadMemory

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
M = 12


def _statistics(features: RandomFourierFeatures, x: np.ndarray, y: np.ndarray):
    statistics = SufficientStatistics(features.n_features)
    statistics.add(features(x), y)
    return statistics


def _data(seed: int, n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 2))
    return x, np.sin(3 * x[:, 0]) + x[:, 1] ** 2 + 0.01 * rng.standard_normal(n)


# ------------------------------------------------------------------------------ math core
def _sites(features, offsets=(0.0, 0.0, 0.0, 0.0)):
    parts = [_data(seed) for seed in range(len(offsets))]
    return [(x, y + offset) for (x, y), offset in zip(parts, offsets)]


@pytest.mark.parametrize("offset_scale", [0.0, 0.7])
def test_the_pooled_posterior_is_exactly_that_of_all_observations(offset_scale) -> None:
    """... with an offset of its own per participant when ``offset_scale > 0``."""
    features = RandomFourierFeatures(2, M, 0.3, seed=0)
    parts = _sites(features, (0.0, 3.0, -2.0, 0.5))
    statistics = [unpack(pack(_statistics(features, x, y)), M) for x, y in parts]
    mean, evidence = pooled_posterior(statistics, np.ones(4), 1e-2, offset_scale)
    # All observations in one regression: the shared features plus one indicator column per
    # participant (prior standard deviation offset_scale), on the values standardized together.
    design = np.zeros((24, M + 4))
    for k, (x, _) in enumerate(parts):
        design[6 * k : 6 * (k + 1), :M] = features(x)
        design[6 * k : 6 * (k + 1), M + k] = 1.0
    targets = np.concatenate([y for _, y in parts])
    location = (targets.mean(), targets.std())
    if offset_scale == 0:
        everything = _statistics(features, np.concatenate([x for x, _ in parts]), targets)
        expected = everything.posterior(1e-2, standardize=location)
    else:
        everything = SufficientStatistics(M + 4)
        everything.add(design, targets)
        scales = np.concatenate([np.ones(M), np.full(4, offset_scale)])
        expected = everything.posterior(1e-2, standardize=location, prior_scales=scales)
    np.testing.assert_allclose(mean, expected.mean[:M], atol=1e-10)
    assert evidence == pytest.approx(expected.log_marginal_likelihood(), rel=1e-9)


def test_the_evidence_wants_offsets_where_sites_differ_by_a_constant_and_not_otherwise() -> None:
    features = RandomFourierFeatures(2, M, 0.3, seed=0)

    def evidence(offsets, offset_scale):
        statistics = [_statistics(features, x, y) for x, y in _sites(features, offsets)]
        return pooled_posterior(statistics, np.ones(4), 1e-2, offset_scale)[1]

    shifted = (0.0, 3.0, -2.0, 0.5)
    assert evidence(shifted, 1.0) > evidence(shifted, 0.0) + 10
    assert evidence((0.0,) * 4, 0.0) > evidence((0.0,) * 4, 1.0)


def test_blocks_round_trip_and_have_the_announced_length() -> None:
    shared = RandomFourierFeatures(2, M, (0.02, 0.5), seed=3)
    maps = pooling_feature_maps(shared)
    assert maps[0] is shared and [f.lengthscale for f in maps[1:]] == [0.05, 0.1, 0.2, 0.5]
    x, y = _data(2)
    vector = pack_blocks([_statistics(f, x, y) for f in maps])
    assert vector.shape == (packed_blocks_length(M),)
    for block, features in zip(unpack_blocks(vector, M), maps):
        np.testing.assert_allclose(block.gram, _statistics(features, x, y).gram, atol=1e-12)


def test_pack_holds_the_upper_triangle_row_by_row_and_unpacks_bit_for_bit() -> None:
    features = RandomFourierFeatures(2, 7, 0.3, seed=4)
    x, y = _data(3)
    statistics = _statistics(features, x, y)
    vector = pack(statistics)
    rows, columns = np.triu_indices(7)
    assert np.array_equal(vector[3 + 2 * 7 :], statistics.gram[rows, columns])
    assert np.array_equal(unpack(vector, 7).gram, statistics.gram)


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda v: v[:-1], "length"),
        (lambda v: np.where(np.arange(len(v)) == 5, np.nan, v), "NaN"),
        (lambda v: np.concatenate([[2.5], v[1:]]), "positive integer"),
        (lambda v: np.concatenate([[0.0], v[1:]]), "positive integer"),
        (lambda v: np.concatenate([v[:1] * 3, v[1:]]), "trace"),  # claims 3x the observations
        (lambda v: np.concatenate([v[: 3 + M], v[3 + M : 3 + 2 * M] * 50, v[3 + 2 * M :]]),
         "feature-value sums"),
        (lambda v: np.concatenate([v[:2], [0.0], v[3:]]), "squared values"),
    ],
)  # fmt: skip
def test_statistics_no_observations_can_give_are_refused(tamper, reason) -> None:
    features = RandomFourierFeatures(2, M, 0.3, seed=0)
    x, y = _data(4)
    vector = pack(_statistics(features, x, y + 3.0))
    unpack(vector, M)  # the honest one passes
    with pytest.raises(ValueError, match=reason):
        unpack(tamper(vector), M)


def test_blocks_of_different_values_are_refused() -> None:
    maps = pooling_feature_maps(RandomFourierFeatures(2, M, (0.02, 0.5), seed=3))
    x, y = _data(2)
    blocks = [_statistics(f, x, y) for f in maps]
    blocks[2] = _statistics(maps[2], x, y + 1.0)
    with pytest.raises(ValueError, match="not of the same values"):
        unpack_blocks(pack_blocks(blocks), M)


def _spread(statistics: SufficientStatistics) -> float:
    return statistics.standardization()[1]


def test_one_participant_claiming_many_observations_weighs_no_more_than_another() -> None:
    features = RandomFourierFeatures(2, M, 0.3, seed=0)
    honest = [_statistics(features, *_data(seed)) for seed in range(3)]
    x = np.random.default_rng(9).uniform(size=(600, 2))
    loud = _statistics(features, x, np.sin(3 * x[:, 0]) + x[:, 1] ** 2)
    # Its 600 observations count as many as the largest other participant's (6), from two
    # participants on: no honest majority needed.
    for group in ([*honest, loud], honest[:2] + [loud], [honest[1], loud]):
        weights = robust_weights(group)
        widest = max(_spread(s) for s in group[:-1])
        expected = 6 / 600 * min(1.0, widest / _spread(loud)) ** 2
        assert weights[-1] == pytest.approx(expected) and weights[-1] * 600 <= 6
    assert robust_weights([loud]) == pytest.approx([1.0])  # alone: never published anyway


def test_one_participant_with_values_of_another_scale_is_weighed_down() -> None:
    features = RandomFourierFeatures(2, M, 0.3, seed=0)
    parts = [_data(seed) for seed in range(4)]
    honest = [_statistics(features, x, y) for x, y in parts[:3]]
    x, y = parts[3]
    loud = _statistics(features, x, 1000.0 * y)
    weights = robust_weights([*honest, loud])
    widest = max(_spread(s) for s in honest)
    assert weights[3] == pytest.approx((widest / _spread(loud)) ** 2) and weights[3] < 1e-5
    assert robust_weights([honest[0], loud])[1] == pytest.approx(
        (_spread(honest[0]) / _spread(loud)) ** 2
    )
    # Values shifted, or of a spread within the others', keep their full weight; the widest
    # participant weighs as the next widest one.
    similar = _statistics(features, x, 0.5 * y + 1.0)
    weights = robust_weights([*honest, similar])
    np.testing.assert_allclose(weights[1:], 1.0)
    assert weights[0] == pytest.approx((_spread(honest[1]) / _spread(honest[0])) ** 2)


@pytest.mark.parametrize(
    ("dims", "lengthscale", "expected"),
    # A smooth function: the 0.5 block. A rough one: the shared multi-scale features (down to
    # 0.02) or the 0.05 block, never a smooth block.
    [(2, 0.5, (4,)), (1, 0.05, (0, 1))],
)
def test_the_evidence_picks_a_block_of_the_functions_scale(dims, lengthscale, expected) -> None:
    for seed in range(3):
        rng = np.random.default_rng(seed)
        truth = RandomFourierFeatures(dims, 2000, lengthscale, seed=11 + seed)
        weights = rng.standard_normal(2000)
        maps = pooling_feature_maps(RandomFourierFeatures(dims, 100, (0.02, 0.5), seed=5))
        x = rng.uniform(size=(120, dims))
        y = truth(x) @ weights + 0.01 * rng.standard_normal(120)
        block, mean = select_posterior([[_statistics(f, x, y) for f in maps]])
        assert block in expected
        assert mean.shape == (maps[block].n_features,)


def test_the_choice_is_the_best_evidence_of_the_grid_and_a_kept_one_its_posterior() -> None:
    """The batched evidences are those of the posterior of each block, noise and offset scale
    (pooled_posterior, one at a time); a kept choice gives that choice's posterior."""
    maps = pooling_feature_maps(RandomFourierFeatures(2, M, (0.05, 0.5), seed=3))
    sites = _sites(None, offsets=(0.0, 0.5, -0.3, 1.0))
    participants = [[_statistics(f, x, y) for f in maps] for x, y in sites]
    grid = {}
    for index in range(len(maps)):
        block = [statistics[index] for statistics in participants]
        weights = robust_weights(block)
        for noise in POOLING_NOISE_VARIANCES:
            for offset in POOLING_OFFSET_SCALES:
                grid[PoolingChoice(index, noise, offset)] = pooled_posterior(
                    block, weights, noise, offset
                )
    best = max(grid, key=lambda c: grid[c][1])
    choice, mean = choose_posterior(participants)
    assert choice == best
    np.testing.assert_allclose(mean, grid[best][0], rtol=1e-8, atol=1e-10)
    for kept in (PoolingChoice(1, 1e-2, 0.3), PoolingChoice(4, 1.0, 0.0)):
        assert kept != best
        again, mean = choose_posterior(participants, keep=kept)
        assert again == kept
        np.testing.assert_allclose(mean, grid[kept][0], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("n_sites", [1, 4, 6, 7])
def test_the_evidence_grid_is_the_evidence_of_each_system(n_sites) -> None:
    """The grid's evidences (one factorization per noise variance, the offsets by a Schur
    complement up to M / 2 sites, by their own systems beyond) are those of each system solved
    on its own, for any number of sites."""
    features = RandomFourierFeatures(2, M, 0.3, seed=1)
    offsets = np.linspace(-2.0, 3.0, n_sites)
    statistics = [_statistics(features, x, y) for x, y in _sites(features, offsets)]
    sums = _PooledSums(statistics, robust_weights(statistics))
    grid = sums.evidence_grid(POOLING_NOISE_VARIANCES, POOLING_OFFSET_SCALES)
    assert grid.shape == (len(POOLING_OFFSET_SCALES), len(POOLING_NOISE_VARIANCES))
    for row, offset_scale in zip(grid, POOLING_OFFSET_SCALES):
        expected, _ = sums.evidences(POOLING_NOISE_VARIANCES, offset_scale)
        np.testing.assert_allclose(row, expected, rtol=1e-10, atol=1e-9)
    with pytest.raises(ValueError, match="positive"):
        sums.evidence_grid((1e-2, 0.0), POOLING_OFFSET_SCALES)


def test_a_near_tie_on_the_grid_is_decided_by_the_exact_evidences(monkeypatch) -> None:
    """Two blocks of the same statistics tie exactly: the first wins, as when every system was
    solved on its own, even where the grid's rounding favours the second."""
    shared = RandomFourierFeatures(2, M, 0.3, seed=0)
    participants = [
        [unpack(pack(_statistics(shared, x, y)), M) for _ in range(2)] for x, y in _sites(shared)
    ]
    grid = _PooledSums.evidence_grid
    calls = []

    def favour_the_second(self, noise_variances, offset_scales):
        calls.append(None)
        values = grid(self, noise_variances, offset_scales)
        return values + 1e-12 * np.abs(values) if len(calls) == 2 else values

    alone, mean = choose_posterior([[p[0]] for p in participants])
    monkeypatch.setattr(_PooledSums, "evidence_grid", favour_the_second)
    choice, tied_mean = choose_posterior(participants)
    assert len(calls) == 2 and choice == alone
    np.testing.assert_array_equal(tied_mean, mean)


def test_a_grid_that_is_not_a_number_falls_back_to_every_system(monkeypatch) -> None:
    maps = pooling_feature_maps(RandomFourierFeatures(2, M, (0.05, 0.5), seed=3))
    participants = [[_statistics(f, x, y) for f in maps] for x, y in _sites(None)]
    expected, mean = choose_posterior(participants)
    monkeypatch.setattr(
        _PooledSums, "evidence_grid", lambda self, noises, offsets: np.full((3, 4), np.nan)
    )
    choice, again = choose_posterior(participants)
    assert choice == expected
    np.testing.assert_array_equal(again, mean)


# -------------------------------------------------------------------------------- server
def _federation(n_clients: int = 3, **protocol) -> Federation:
    lone = {"min_contributors": 1} if n_clients == 1 else {}  # a round of one is published
    config = FTSConfig(**{"n_features": M, "n_init": 2, **lone, **protocol})
    fed = Federation.create("pooled", search_space=SPACE, n_clients=n_clients, protocol=config)
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def _packed(fed: Federation, seed: int) -> np.ndarray:
    x, y = _data(seed)
    return pack_blocks([_statistics(f, x, y) for f in fed.pooling_features()])


def _upload_data(fed: Federation, client: str, seed: int) -> SufficientStatistics:
    vector = _packed(fed, seed)
    fed.upload(client, vector, n_observations=6, iteration=0)
    return unpack_blocks(vector, M)


def _payload(
    fed: Federation,
    client: str,
    round_index: int,
    omega: np.ndarray,
    *,
    n_observations: int,
    same_as: str | None = None,
) -> bytes:
    """An upload message of ``client`` for ``round_index`` (sent by hand, to forge or parse)."""
    return encode_upload(
        config_hash=fed.config_hash,
        round_index=round_index,
        client_id=client,
        omega=omega,
        n_observations=n_observations,
        iteration=round_index,
        same_as=same_as,
    )


def _sent(fed: Federation, round_index: int, client: str) -> str:
    """How a stored upload carries its vector: "omega" (in full) or "same_as" (by digest)."""
    record, tail = split_frame(fed.read_upload(round_index, client))
    assert ("length" in record) != ("same_as" in record) and bool(tail) == ("length" in record)
    return "omega" if "length" in record else "same_as"


def test_the_default_federation_pools_and_broadcasts_the_posterior_of_everyones_data() -> None:
    fed = _federation()
    assert fed.fts.aggregation == "pooled"
    server = FederationServer(fed)
    blocks = [_upload_data(fed, f"c{i}", seed=i) for i in range(3)]
    report = server.step()
    assert report is not None and report.n_contributors == 3
    assert report.upload_norms == ()  # statistics have no norm to calibrate a clip norm by
    broadcast = fed.latest_broadcast()
    assert broadcast.aggregation == "pooled" and broadcast.vectors.shape[0] == 1
    block, mean = select_posterior(blocks)
    assert broadcast.feature_block == block
    np.testing.assert_allclose(broadcast.vectors[0], mean, atol=1e-12)


@pytest.mark.usefixtures("propagate")
def test_inconsistent_statistics_are_rejected_logged_and_never_pooled(caplog) -> None:
    fed = _federation(n_clients=2, min_contributors=1)  # c0 alone
    server = FederationServer(fed)
    honest = _upload_data(fed, "c0", seed=0)
    x, y = _data(1)
    blocks = [_statistics(f, x, y) for f in fed.pooling_features()]
    for block in blocks:
        block.count = 1000  # claims 1,000 observations behind six
    forged = pack_blocks(blocks)
    fed.send_upload("c1", 0, _payload(fed, "c1", 0, forged, n_observations=1000))
    with caplog.at_level(logging.WARNING):
        report = server.step(force=True)
    assert report.contributors == ("c0",)
    assert "inconsistent statistics" in dict(report.rejected)["c1"]
    assert any("inconsistent statistics" in r.getMessage() for r in caplog.records)
    _, mean = select_posterior([honest])
    np.testing.assert_allclose(fed.latest_broadcast().vectors[0], mean, atol=1e-12)


def test_the_largest_pooled_upload_fits_the_upload_bound() -> None:
    fed = _federation(n_clients=1, n_features=300)
    x, y = _data(0, n=40)
    vector = pack_blocks([_statistics(f, x, y) for f in fed.pooling_features()])
    fed.upload("c0", vector, n_observations=40, iteration=0)  # sealed: about 950,000 characters
    assert FederationServer(fed).step(force=True).n_contributors == 1


def test_a_vector_of_the_wrong_length_is_refused_before_it_is_sent() -> None:
    fed = _federation(n_clients=1)
    with pytest.raises(ValueError, match=f"shape \\({packed_blocks_length(M)},\\)"):
        fed.upload("c0", np.zeros(M), n_observations=1, iteration=0)


def test_a_dp_federation_keeps_vector_uploads() -> None:
    privacy = DPConfig(noise_multiplier=1.0, sample_rate=1.0, clip_norm=1.0)
    fed = Federation.create("dp", search_space=SPACE, n_clients=2, privacy=privacy)
    assert fed.fts.aggregation == "weighted" and fed.fts.upload_length == fed.fts.n_features
    with pytest.raises(ValueError, match="sufficient statistics"):
        Federation.create(
            "dp2", search_space=SPACE, n_clients=2, protocol=FTSConfig(aggregation="pooled"),
            privacy=privacy,
        )  # fmt: skip


# ----------------------------------------------------------------- statistics sent again
def test_statistics_sent_again_go_by_digest_and_pool_exactly_as_in_full() -> None:
    fed = _federation(n_clients=2)
    server = FederationServer(fed, discard_uploads=False)
    first, second, fresh = _packed(fed, 0), _packed(fed, 1), _packed(fed, 2)
    fed.upload("c0", first, n_observations=6, iteration=0)
    fed.upload("c0", first, n_observations=6, iteration=0)  # the same round: in full again
    fed.upload("c1", second, n_observations=6, iteration=0)
    assert _sent(fed, 0, "c0") == "omega"
    assert server.step().round == 0
    fed.upload("c0", first, n_observations=7, iteration=1)
    fed.upload("c1", fresh, n_observations=7, iteration=1)
    assert (_sent(fed, 1, "c0"), _sent(fed, 1, "c1")) == ("same_as", "omega")
    report = server.step()
    assert report.contributors == ("c0", "c1") and report.rejected == ()
    _, mean = select_posterior([unpack_blocks(first, M), unpack_blocks(fresh, M)])
    np.testing.assert_allclose(fed.latest_broadcast().vectors[0], mean, atol=1e-12)


def test_statistics_sent_again_are_named_by_the_receipt_of_their_upload() -> None:
    """By the receipt of the upload that carried them in full (which the participant and the
    server each have at no cost), not by a digest of the vector (a pass over it each side)."""
    fed = _federation(n_clients=1)
    server = FederationServer(fed, discard_uploads=False)
    first = _packed(fed, 0)
    fed.upload("c0", first, n_observations=6, iteration=0)
    server.step()
    fed.upload("c0", first, n_observations=7, iteration=1)
    record, _ = split_frame(fed.read_upload(1, "c0"))
    assert record["same_as"] == receipt(fed.trust, fed.store.read_uploads(0)["c0"])
    assert record["same_as"] != vector_digest(first)
    report = server.step()
    assert report.contributors == ("c0",) and report.rejected == ()


def test_a_new_server_gets_the_statistics_in_full_again() -> None:
    fed = _federation(n_clients=1)
    server = FederationServer(fed, discard_uploads=False)
    first = _packed(fed, 0)
    fed.upload("c0", first, n_observations=6, iteration=0)
    server.step()
    restarted = FederationServer(fed, discard_uploads=False)  # holds nothing yet
    fed.upload("c0", first, n_observations=7, iteration=1)
    assert _sent(fed, 1, "c0") == "omega"
    assert restarted.step().contributors == ("c0",)


def _named_by_digest() -> Federation:
    """A federation whose round 0 had c0's and c1's statistics, and where c0 has sent its
    again, by digest, to round 1."""
    fed = _federation(n_clients=2, min_contributors=1)  # round 1 of c1 alone
    server = FederationServer(fed)
    fed.upload("c0", _packed(fed, 0), n_observations=6, iteration=0)
    fed.upload("c1", _packed(fed, 1), n_observations=6, iteration=0)
    server.step()
    fed.upload("c0", _packed(fed, 0), n_observations=7, iteration=1)
    assert _sent(fed, 1, "c0") == "same_as"
    return fed


@pytest.mark.usefixtures("propagate")
def test_statistics_named_to_a_server_that_does_not_hold_them_are_re_sent_in_full(
    caplog,
) -> None:
    """The server restarts after the upload by digest: refused, then re-sent in full."""
    fed = _named_by_digest()
    fed.upload("c1", _packed(fed, 2), n_observations=7, iteration=1)
    restarted = FederationServer(fed, discard_uploads=False)
    with caplog.at_level(logging.WARNING):
        report = restarted.step(force=True)
        assert report.contributors == ("c1",)
        assert "does not hold" in dict(report.rejected)["c0"]
        fed.latest_broadcast()  # c0 sees that round 1 went without it
    assert any("is not in its broadcast" in r.getMessage() for r in caplog.records)
    assert _sent(fed, 2, "c0") == "omega"
    assert "c0" in restarted.step(force=True).contributors


@pytest.mark.parametrize("restart", [True, False])
def test_a_participant_waiting_for_a_round_re_sends_statistics_named_by_digest(restart) -> None:
    """When a new server starts (at once) or the wait times out (a round that never closes)."""
    fed = _named_by_digest()
    if restart:
        FederationServer(fed)
    assert fed.wait_for_round(1, timeout=0.3 if restart else 0.1, poll_interval=0.01) is None
    assert _sent(fed, 1, "c0") == "omega"


def test_an_upload_by_digest_is_checked_at_the_boundary() -> None:
    fed = _federation(n_clients=1)
    vector = _packed(fed, 0)

    def parse(payload: bytes, held):  # noqa: ANN001, ANN202
        return parse_upload(
            payload,
            client_id="c0",
            round_index=1,
            config_hash=fed.config_hash,
            length=fed.fts.upload_length,
            held=held,
        )

    payload = _payload(fed, "c0", 1, vector, n_observations=7, same_as=vector_digest(vector))
    header, tail = split_frame(payload)
    assert "length" not in header and tail == b""
    np.testing.assert_array_equal(parse(payload, (vector_digest(vector), vector)).omega, vector)
    for held in (None, (vector_digest(vector + 1.0), vector + 1.0)):
        with pytest.raises(UploadRejected, match="does not hold"):
            parse(payload, held)
    both = binary_frame(header | {"length": len(vector)}, vector.astype("<f8").tobytes())
    with pytest.raises(UploadRejected, match="either a vector or 'same_as'"):
        parse(both, (vector_digest(vector), vector))


def _counting_choices(monkeypatch) -> tuple[list[float], list[float]]:  # noqa: ANN001
    """The pooled counts of every posterior the server computes, and of every new choice."""
    pooled, chosen = [], []

    def counted(statistics, keep=None, **options):  # noqa: ANN001, ANN003, ANN202
        pooled.append(statistics[0][0].count)
        if keep is None:
            chosen.append(sum(s[0].count for s in statistics))
        return choose_posterior(statistics, keep=keep, **options)

    monkeypatch.setattr("optuna_fedbo.core.pooling.choose_posterior", counted)
    return pooled, chosen


def _alone(
    n_trials: int,
    *,
    n_clients: int = 1,
    choose_again: bool = False,
    sampler: type = FedTransferSampler,
    **protocol: Any,
) -> tuple[list[int], list[dict]]:
    """``n_trials`` trials of one site, alone in its federation (of ``n_clients``: the others
    never run; the server choosing the pooling again every 10% if ``choose_again``): the rounds
    with fresh statistics, and the trials' parameters."""
    fed = _federation(n_clients=n_clients, n_init=2, min_contributors=1, **protocol)
    server = FederationServer(fed, discard_uploads=False)
    if choose_again:
        server._pooling = KeptChoice()
    study = optuna.create_study(sampler=sampler(fed, "c0", seed=0))
    previous = None
    fresh = []
    for round_index in range(n_trials):
        study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("y", 0, 1), 1)
        server.step(force=True)
        broadcast = fed.latest_broadcast().vectors[0]
        if _sent(fed, round_index, "c0") == "omega":
            fresh.append(round_index + 1)
        else:
            np.testing.assert_array_equal(broadcast, previous)
        previous = broadcast
    return fresh, [t.params for t in study.trials]


#: The trials after which a participant that refreshes its statistics every 10% sends fresh
#: ones, up to 30 (``n_init=2``).
_EVERY_TEN_PERCENT = [*range(1, 12), 13, 15, 17, 19, 21, 24, 27, 30]


def test_a_pooled_participant_refreshes_its_statistics_every_ten_percent(monkeypatch) -> None:
    """Fresh statistics after every trial up to 11 observations, then once they have grown by
    10%; in between the last ones again, by digest, and the server reuses its posterior. So
    also while it is alone in a federation of two (the other may join at any time, and its
    broadcasts then pool these statistics)."""
    pooled, _ = _counting_choices(monkeypatch)
    fresh, _ = _alone(30, n_clients=2)
    assert fresh == _EVERY_TEN_PERCENT
    assert pooled == fresh


def test_a_lone_participant_sends_its_design_statistics_for_good(monkeypatch) -> None:
    """In a one-site federation every broadcast holds only the site's data and is left out,
    so fresh statistics would serve nobody: after its initial design the participant names the
    design's statistics for good, and the server, choosing the pooling once, pools them once.
    Its trials are those it ran when it refreshed them every 10% (beside a server that chose
    once, and in a federation of two beside a server that chose again at every refresh)."""
    pooled, chosen = _counting_choices(monkeypatch)
    fresh, params = _alone(60)
    assert fresh == [1, 2]  # n_init = 2: round 0 closed on one observation, then the design
    assert pooled == fresh and chosen == [1]
    pooled.clear(), chosen.clear()
    with monkeypatch.context() as refreshing:  # what it sent before: fresh every 10%
        held = UploadMemory.statistics_held
        refreshing.setattr(
            UploadMemory, "statistics_held", lambda self, study, n, **_: held(self, study, n)
        )
        refreshed, same_params = _alone(60)
    assert refreshed[: len(_EVERY_TEN_PERCENT)] == _EVERY_TEN_PERCENT and len(refreshed) > 23
    assert pooled == refreshed and chosen == [1]  # the lone server chose once all the same
    assert same_params == params
    _, with_another = _alone(60, n_clients=2, choose_again=True)
    assert with_another == params


def test_a_lone_participant_that_uses_its_broadcasts_refreshes_them() -> None:
    """``transfer="schedule"`` (the papers' participant) uses a broadcast of its own data: its
    statistics stay fresh."""
    fresh, _ = _alone(30, sampler=FedThompsonSampler, transfer="schedule")
    assert fresh == _EVERY_TEN_PERCENT


def test_a_server_of_two_participants_chooses_the_pooling_again_as_they_grow(
    monkeypatch,
) -> None:
    """With two participants the server does not keep its first choice: block, noise and
    offsets are chosen again as their observations grow (by 10% at least each time)."""
    _, chosen = _counting_choices(monkeypatch)
    fed = _federation(n_clients=2, n_init=2)
    server = FederationServer(fed)
    studies = [
        optuna.create_study(sampler=FedTransferSampler(fed, f"c{i}", seed=i)) for i in range(2)
    ]
    for _ in range(8):
        for study in studies:
            study.optimize(lambda t: t.suggest_float("x", 0, 1) * t.suggest_float("y", 0, 1), 1)
        server.step(force=True)
    assert chosen == [2, 4, 6, 8, 10, 12, 14, 16]  # one observation each, then two, ...


@pytest.mark.parametrize("growth", [REFIT_GROWTH, math.inf])
def test_a_kept_choice_is_chosen_again_after_its_growth_or_for_other_contributors(
    monkeypatch, growth
) -> None:
    _, chosen = _counting_choices(monkeypatch)
    maps = pooling_feature_maps(RandomFourierFeatures(2, M, (0.05, 0.5), seed=3))
    participants = [[_statistics(f, x, y) for f in maps] for x, y in _sites(None)]
    kept = KeptChoice(growth)
    choice, mean = kept.choose(participants, ["a", "b"], 20)
    for count in (20, 21.9):
        assert kept.choose(participants, ["b", "a"], count)[0] == choice
    assert kept.keep(["a"], 20) is None
    assert (kept.keep(["a", "b"], 22) is None) == (growth == REFIT_GROWTH)
    assert (kept.keep(["a", "b"], 1e9) is None) == (growth == REFIT_GROWTH)
    kept.choose(participants, ["a", "b"], 22)
    assert len(chosen) == (2 if growth == REFIT_GROWTH else 1)


# --------------------------------------------------------------------------- participant
def test_participants_upload_the_statistics_of_their_oriented_values() -> None:
    fed = _federation(n_clients=1, n_init=4)
    sampler = FedTransferSampler(fed, "c0", seed=3)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.optimize(lambda t: 100.0 * (t.suggest_float("x", 0, 1) - t.suggest_float("y", 0, 1)), 4)
    upload = parse_upload(
        fed.read_upload(0, "c0"),
        client_id="c0",
        round_index=0,
        config_hash=fed.config_hash,
        length=fed.fts.upload_length,
    )
    blocks = unpack_blocks(upload.omega, M)
    points = np.array([[t.params["x"], t.params["y"]] for t in study.trials])
    values = -np.array([t.value for t in study.trials])  # oriented for maximization
    for block, features in zip(blocks, fed.pooling_features()):
        expected = _statistics(features, points, values)
        np.testing.assert_allclose(block.feature_target, expected.feature_target, atol=1e-9)
        np.testing.assert_allclose(block.gram, expected.gram, atol=1e-12)
        assert block.count == 4


def test_a_pooled_broadcast_on_a_single_scale_block_guides_the_participant() -> None:
    """Participants use the broadcast's block; its maximizer is a late joiner's first point."""
    fed = _federation(n_clients=2, n_init=6, min_contributors=1)  # c0's round alone
    server = FederationServer(fed)

    def objective(trial: optuna.Trial) -> float:
        x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
        return -((x - 0.8) ** 2) - (y - 0.3) ** 2

    early = optuna.create_study(
        direction="maximize", sampler=FedTransferSampler(fed, "c0", seed=0)
    )
    early.optimize(objective, n_trials=6)
    server.step(force=True)
    broadcast = fed.latest_broadcast()
    late = optuna.create_study(direction="maximize", sampler=FedTransferSampler(fed, "c1", seed=1))
    late.optimize(objective, n_trials=1)
    assert late.trials[0].system_attrs["fedbo:mode"] == "federated"
    g = fed.pooling_features()[broadcast.feature_block]
    grid = np.stack(np.meshgrid(*[np.linspace(0, 1, 101)] * 2), -1).reshape(-1, 2)
    first = np.array([[late.trials[0].params["x"], late.trials[0].params["y"]]])
    values = g(grid) @ broadcast.vectors[0]
    assert (g(first) @ broadcast.vectors[0])[0] >= values.max() - 1e-3


def test_a_pooled_broadcast_of_zeros_is_nothing_to_transfer(monkeypatch) -> None:
    """A zero pooled vector offers nothing: a joining participant starts its own design instead
    of maximizing it, and the others' GP steps take no prior mean from it."""
    from optuna_fedbo.federation.fts.server import FTSServer

    pool = FTSServer._pool

    def zeros(self, *args):
        block, mean = pool(self, *args)
        return block, np.zeros_like(mean)

    monkeypatch.setattr(FTSServer, "_pool", zeros)
    fed = _federation(n_clients=3, n_init=4)
    server = FederationServer(fed)

    def objective(trial: optuna.Trial) -> float:
        x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
        return -((x - 0.8) ** 2) - (y - 0.3) ** 2

    studies = [
        optuna.create_study(direction="maximize", sampler=FedTransferSampler(fed, c, seed=i))
        for i, c in enumerate(("c0", "c1"))
    ]
    for study in studies:
        study.optimize(objective, n_trials=4)
    assert server.step(force=True) is not None
    broadcast = fed.latest_broadcast()
    assert broadcast.aggregation == "pooled" and not broadcast.vectors.any()
    joiner = optuna.create_study(
        direction="maximize", sampler=FedTransferSampler(fed, "c2", seed=3)
    )
    joiner.optimize(objective, n_trials=1)
    assert joiner.trials[0].system_attrs["fedbo:mode"] == "init"
    studies[0].optimize(objective, n_trials=2)
    assert [t.system_attrs["fedbo:mode"] for t in studies[0].trials[4:]] == ["fallback"] * 2


def test_a_pooled_participant_keeps_the_statistics_its_uploads_computed(monkeypatch) -> None:
    """The statistics an upload computed with the finishing trial become the participant's
    when that trial comes in (instead of adding it again): the same numbers as adding every
    trial as it comes."""
    from optuna_fedbo.samplers._observations import TrialObservations

    kept = []
    expect = TrialObservations.expect

    def counted(self, version, trial, target, statistics):  # noqa: ANN001, ANN202
        kept.append(trial.number)
        expect(self, version, trial, target, statistics)

    monkeypatch.setattr(TrialObservations, "expect", counted)
    fed = _federation(n_clients=2, n_init=2, min_contributors=1)  # c1 never runs
    server = FederationServer(fed)
    sampler = FedTransferSampler(fed, "c0", seed=0)
    study = optuna.create_study(sampler=sampler)
    for _ in range(16):
        study.optimize(
            lambda t: (t.suggest_float("x", 0, 1) - 0.3) ** 2 + t.suggest_float("y", 0, 1), 1
        )
        server.step(force=True)
    assert kept[:11] == list(range(11)) and len(kept) < 16  # fresh statistics, then fewer
    reference = TrialObservations(sampler._encoder, sampler._feature_maps)
    for trial in study.trials[:15]:  # one at a time, as they came in (the last is not in yet)
        reference._add([trial], study.direction)
    for a, b in zip(sampler._observations.statistics, reference.statistics):
        assert np.array_equal(a.gram, b.gram) and np.array_equal(
            a.feature_target, b.feature_target
        )
        assert np.array_equal(a.feature_sum, b.feature_sum)
        assert (a.count, a.target_sum, a.target_square_sum) == (
            b.count,
            b.target_sum,
            b.target_square_sum,
        )

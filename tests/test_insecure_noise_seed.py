"""The research-only DP noise seed: simulate() repeats DP runs exactly; nothing else takes it."""

from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.fts.messages import parse_broadcast
from optuna_fedbo.samplers._fed_pne import FedPNESampler
from optuna_fedbo.simulation import simulate
from optuna_fedbo.simulation import simulate_fedpne

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {"x": FloatDistribution(0.0, 1.0)}


def _objective(shift: float):  # noqa: ANN202
    def objective(trial: optuna.Trial) -> float:
        return -((trial.suggest_float("x", 0.0, 1.0) - 0.3 - shift) ** 2)

    return objective


def _dp_run(noise_seed: int | None) -> list[np.ndarray]:
    result = simulate(
        [_objective(0.05 * i) for i in range(4)],
        search_space=SPACE,
        n_rounds=2,
        protocol=FTSConfig(n_features=8, n_init=2, n_subregions=2),
        privacy=DPConfig(1.0, 0.5, 5.0),
        seed=3,
        sampler_kwargs={"n_candidates": 32, "n_refinements": 0},
        progress=False,
        insecure_noise_seed=noise_seed,
    )
    store = result.federation.store
    payloads = [store.read_broadcast(t._trial_id)[1] for t in store.broadcast_trials()]
    return [np.asarray(parse_broadcast(p).vectors) for p in payloads]


def test_simulate_repeats_a_dp_run_exactly_with_the_same_noise_seed() -> None:
    first, again, other = _dp_run(7), _dp_run(7), _dp_run(8)
    assert len(first) == 2
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_without_a_noise_seed_the_dp_noise_comes_from_the_os() -> None:
    # Noise of standard deviation z phi_max S / q > 1 per coordinate: two OS draws never agree.
    first, second = _dp_run(None), _dp_run(None)
    assert not np.array_equal(first[0], second[0])


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_simulate_rejects_an_invalid_noise_seed(bad: object) -> None:
    with pytest.raises(ValueError, match="insecure_noise_seed"):
        simulate(
            [_objective(0.0)],
            search_space=SPACE,
            n_rounds=1,
            progress=False,
            insecure_noise_seed=bad,  # type: ignore[arg-type]
        )


def test_the_server_refuses_a_noise_seed() -> None:
    fed = Federation.create(
        "refuse", search_space=SPACE, n_clients=2, protocol=FTSConfig(n_features=8)
    )
    with pytest.raises(ValueError, match="refuses insecure_noise_seed.*simulate"):
        FederationServer(fed, insecure_noise_seed=1)  # type: ignore[call-arg]
    pne = Federation.create(
        "refuse-pne", search_space=SPACE, n_clients=2, protocol=FedPNEConfig(horizon=20)
    )
    with pytest.raises(ValueError, match="refuses insecure_noise_seed"):
        FederationServer(pne, insecure_noise_seed=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="refuses insecure_noise_seed"):
        FedPNESampler(pne, "a", insecure_noise_seed=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", ["serve", "create"])
@pytest.mark.parametrize("flag", ["--insecure-noise-seed", "--noise-seed"])
def test_the_cli_refuses_a_noise_seed(
    command: str, flag: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--search-space", "{}", "--n-clients", "2"] if command == "create" else []
    storage = f"sqlite:///{tmp_path / 'fed.db'}"
    code = cli_main([command, "--storage", storage, "--name", "f", flag, "3", *extra])
    assert code == 2
    error = capsys.readouterr().err
    assert "refuses insecure_noise_seed" in error
    assert "operating system's entropy" in error
    assert not (tmp_path / "fed.db").exists()  # refused before anything was created


def _fedpne_means(noise_seed: int | None) -> list[dict]:
    result = simulate_fedpne(
        [
            lambda t, m=m: 0.5 + 0.1 * m - (t.suggest_float("x", 0.0, 1.0) - 0.4) ** 2
            for m in (0, 1, 2)
        ],
        search_space=SPACE,
        protocol=FedPNEConfig(horizon=60, dp_epsilon=1.0, dp_delta=1e-5, variant="paper"),
        seed=1,
        insecure_noise_seed=noise_seed,
    )
    return [r.phase_report.means for r in result.reports]


def test_simulate_fedpne_repeats_the_reward_noise_with_the_same_seed() -> None:
    first, again, other = _fedpne_means(4), _fedpne_means(4), _fedpne_means(5)
    assert first and first == again
    assert first != other

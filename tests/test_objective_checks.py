"""The federation knows the objective: its direction, its parameters; one warning per problem."""

from __future__ import annotations

import itertools
import json
import logging

from _site_objective import objective as _objective
from _site_objective import warnings_with as _warnings
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
import pytest

import optuna_fedbo as fb
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FedPNEConfig
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.cli import main as cli_main
from optuna_fedbo.federation.config import FederationConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _fts(direction=None, storage=None) -> Federation:
    return Federation.create(
        f"objective-{next(_names)}", search_space=SPACE, n_clients=1, storage=storage,
        protocol=FTSConfig(n_features=20, n_init=2, min_contributors=1), seed=1,
        direction=direction,
    )  # fmt: skip


# ---------------------------------------------------------------------------- direction
@pytest.mark.parametrize("protocol", ["fts", "fedpne"])
def test_a_site_of_the_other_direction_is_refused_with_the_fix(protocol) -> None:
    fed = Federation.create(
        f"direction-{next(_names)}", search_space=SPACE, n_clients=1, seed=1,
        protocol=FTSConfig(n_features=20, n_init=2, min_contributors=1) if protocol == "fts"
        else FedPNEConfig(horizon=40),
        direction="maximize",
    )  # fmt: skip
    sampler = fb.FedSampler(fed, client_id="a", seed=0)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    with pytest.raises(ValueError, match="direction='maximize'") as info:
        study.optimize(_objective, n_trials=3)
    message = str(info.value)
    assert "\n" not in message and "'minimize'" in message and fed.name in message
    # The trial failed (nothing half-written) and nothing left the site.
    assert [t.state for t in study.trials] == [TrialState.FAIL]
    assert fed.store.upload_keys(fed.open_round()) == []
    # The matching direction runs.
    good = optuna.create_study(direction="maximize", sampler=sampler)
    good.optimize(_objective, n_trials=1)
    assert all(t.state == TrialState.COMPLETE for t in good.trials)


def test_the_direction_is_part_of_the_configuration() -> None:
    fed = _fts("minimize")
    assert fed.config.direction == "minimize"
    assert fed.config.to_dict()["direction"] == "minimize"
    assert FederationConfig.from_json(fed.config.to_json()).direction == "minimize"
    # Undeclared: not stored at all, so older federations keep their configuration (and hash).
    assert "direction" not in _fts().config.to_dict()
    assert fb.FedSampler(_fts(), client_id="a") is not None  # and any study direction runs
    with pytest.raises(ValueError, match="direction must be 'maximize', 'minimize' or None"):
        _fts("max")


def test_load_if_exists_names_a_different_direction() -> None:
    fed = _fts("maximize")
    with pytest.raises(ValueError, match="direction: 'maximize' != 'minimize'"):
        Federation.create(
            fed.name, search_space=SPACE, n_clients=1, storage=fed.storage,
            protocol=FTSConfig(n_features=20, n_init=2, min_contributors=1), seed=1,
            direction="minimize",
            load_if_exists=True,
        )  # fmt: skip


def test_cli_create_takes_the_direction(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    space = json.dumps({"x": json.loads(optuna.distributions.distribution_to_json(SPACE["x"]))})
    base = ["create", "--storage", url, "--n-clients", "2", "--search-space", space]
    assert cli_main([*base, "--name", "cli-direction", "--direction", "minimize"]) == 0
    fed = Federation.load("cli-direction", storage=url)
    assert fed.config.direction == "minimize"
    with pytest.raises(SystemExit) as exit_info:
        cli_main([*base, "--name", "cli-direction-2", "--direction", "up"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'up'" in capsys.readouterr().err


# --------------------------------------------------------------------------- parameters
def test_a_site_that_leaves_out_a_federation_parameter_is_told_by_name(propagate, caplog) -> None:
    fed = _fts()
    sampler = fb.FedSampler(fed, client_id="a", seed=0, n_candidates=32, n_refinements=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    with caplog.at_level(logging.WARNING):
        study.optimize(lambda t: -((t.suggest_float("x", 0, 1) - 0.3) ** 2), n_trials=6)
        sampler.finish()
    (told,) = _warnings(caplog, "suggest every parameter")
    assert "'y'" in told and "'x'" not in told and "suggest every parameter" in told
    (end,) = _warnings(caplog, "no broadcast of federation")
    assert "did not suggest 'y'" in end and "initial design" not in end


def test_a_lone_site_is_told_its_broadcasts_held_only_its_own_trials(propagate, caplog) -> None:
    # A one-site federation publishes every round, but each holds only the site's own data,
    # which the participant leaves out: the end-of-study warning says that, not "too slow".
    fed = _fts()
    server = fb.FederationServer(fed)
    sampler = fb.FedSampler(fed, client_id="a", seed=0, n_candidates=32, n_refinements=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    with caplog.at_level(logging.WARNING):
        study.optimize(_objective, n_trials=6, callbacks=[lambda *_: server.step(force=True)])
        sampler.finish()
    assert fed.latest_broadcast() is not None
    assert sampler.counts.federated == 0 and sampler.counts.local > 0
    (end,) = _warnings(caplog, "no broadcast of federation")
    assert "had this participant as its only contributor" in end
    assert "published in time" not in end


def test_a_lone_sites_other_worker_leaves_out_the_broadcast_too() -> None:
    # A second worker of the site (its own sampler, same client id) uploaded to no round: a
    # one-site federation's broadcasts are the site's own all the same.
    fed = _fts()
    server = fb.FederationServer(fed)
    sampler = fb.FedSampler(fed, client_id="a", seed=0, n_candidates=32, n_refinements=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(_objective, n_trials=4, callbacks=[lambda *_: server.step(force=True)])
    broadcast = fed.latest_broadcast()
    assert broadcast is not None and broadcast.n_contributors == 1
    other_worker = fb.FedSampler(fed, client_id="a", seed=1, n_candidates=32, n_refinements=0)
    assert other_worker._only_own(broadcast)


def test_an_extra_parameter_is_warned_about_once(propagate, caplog) -> None:
    fed = _fts()
    sampler = fb.FedSampler(fed, client_id="a", seed=0, n_candidates=32, n_refinements=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        return _objective(trial) + 0.01 * trial.suggest_float("extra", 0, 1)

    with caplog.at_level(logging.WARNING):
        study.optimize(objective, n_trials=15)
    assert len(_warnings(caplog, "`extra`")) == 1  # not 15
    assert not _warnings(caplog, "did not suggest")  # every federation parameter is there

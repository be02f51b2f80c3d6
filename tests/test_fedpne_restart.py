"""DP-Fed-PNE restarts never noise a release again (issue 26, item 7): a participant whose upload
was erased re-sends, from a new process, the noisy means it kept sealed in its key folder, bit for
bit, without drawing noise again; a kept release that does not open stops the upload.

This file is also the participant program: ``python THIS_FILE STORAGE NAME CLIENT_ID N_TRIALS
STUDY_STORAGE``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
import stat
import subprocess
import sys
import uuid

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}


def _worker(storage: str, name: str, client_id: str, n_trials: int, study_storage: str) -> int:
    import optuna

    import optuna_fedbo.core.fedpne.client as client
    from optuna_fedbo.federation import Federation
    from optuna_fedbo.samplers._fed_pne import FedPNESampler

    draws = []
    privatize = client.privatize_rewards

    def counted(rewards, sigma, rng=None):  # noqa: ANN001, ANN202
        draws.append(len(rewards))
        return privatize(rewards, sigma, rng)

    client.privatize_rewards = counted
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = FedPNESampler(
        Federation.load(name, storage),
        client_id,
        phase_timeout=0.5,
        on_timeout="best",
        poll_interval=0.02,
    )
    study = optuna.create_study(
        study_name=client_id,
        storage=study_storage,
        direction="maximize",
        sampler=sampler,
        load_if_exists=True,
    )
    study.optimize(lambda t: 1.0 - (t.suggest_float("x", 0.0, 1.0) - 0.3) ** 2, n_trials)
    print(json.dumps({"draws": draws, "n_trials": len(study.trials)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_worker(*sys.argv[1:4], int(sys.argv[4]), sys.argv[5]))


# ------------------------------------------------------------------------------ the tests
import numpy as np  # noqa: E402
from optuna.distributions import FloatDistribution  # noqa: E402
import pytest  # noqa: E402

from optuna_fedbo.federation import Federation  # noqa: E402
from optuna_fedbo.federation import FedPNEConfig  # noqa: E402
from optuna_fedbo.federation.fedpne.releases import ReleaseBook  # noqa: E402
from optuna_fedbo.federation.fedpne.releases import ReleaseError  # noqa: E402

SPACE = {"x": FloatDistribution(0.0, 1.0)}
CONFIG = FedPNEConfig(horizon=200, value_range=[0.0, 1.0], dp_epsilon=5.0, dp_delta=1e-3)


def _run(url: str, name: str, n_trials: int, study_url: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, url, name, "c0", str(n_trials), study_url],
        capture_output=True, text=True, env=ENV, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_restarted_participant_resends_its_kept_release_bit_for_bit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    name = f"restart-{uuid.uuid4().hex[:8]}"
    fed = Federation.create(name, search_space=SPACE, n_clients=2, storage=url, protocol=CONFIG)
    fed.join("c0")
    budget = fed.channel.initial_phase.budget
    study_url = f"sqlite:///{tmp_path / 'c0.db'}"
    # A participant pulls phase 1 and uploads its noisy node means (one draw per reward) ...
    first = _run(url, name, budget, study_url)
    assert first["draws"] == [budget]
    stored = fed.store.read_uploads(0)["c0"]
    released = json.loads(fed.read_upload(0, "c0"))["means"]
    # ... someone with the URL erases the phase's uploads (the whole study) ...
    fed.storage.delete_study(fed.storage.get_study_id_from_name(fed.store.uploads_study_name(0)))
    # ... and the participant restarts in a new process: it re-sends the same release.
    second = _run(url, name, 1, study_url)
    fed = Federation.load(name, url)  # (not the ids of the studies this process cached)
    assert second["draws"] == [] and second["n_trials"] == budget + 1
    assert fed.store.read_uploads(0)["c0"] != stored  # sent again (a new envelope) ...
    resent = json.loads(fed.read_upload(0, "c0"))["means"]
    assert resent == released  # ... holding the same noisy means, bit for bit
    assert all(
        np.float64(resent[k]).tobytes() == np.float64(v).tobytes() for k, v in released.items()
    )
    # Kept in the key folder: readable by its owner only, and sealed.
    (kept,) = (Path(os.environ["OPTUNA_FEDBO_HOME"]) / "participants" / fed.federation_id).glob(
        "*.releases/000001"
    )
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    text = kept.read_text()
    assert not any(repr(value) in text for value in released.values())


def test_a_kept_release_that_does_not_open_stops_the_upload(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    fed = Federation.create(
        f"restart-{uuid.uuid4().hex[:8]}",
        search_space=SPACE,
        n_clients=2,
        storage=url,
        protocol=CONFIG,
    )
    fed.join("c0")
    book = ReleaseBook(fed, "c0")
    phase = fed.channel.initial_phase
    means = {node.key: 0.25 for node in phase.nodes}
    assert book.keep(phase, means) == means
    assert ReleaseBook(fed, "c0").recall(phase) == means
    # Never overwritten: a second worker's release of the phase gives way to the kept one.
    assert ReleaseBook(fed, "c0").keep(phase, {node.key: 0.5 for node in phase.nodes}) == means
    assert book.recall(phase) == means
    (kept,) = (Path(os.environ["OPTUNA_FEDBO_HOME"]) / "participants" / fed.federation_id).glob(
        "*.releases/000001"
    )
    record = json.loads(kept.read_text())
    record["ct"] = record["ct"][:-4] + ("AAAA" if record["ct"][-4:] != "AAAA" else "BBBB")
    kept.write_text(json.dumps(record))
    with pytest.raises(ReleaseError, match="does not open with this participant's key"):
        book.recall(phase)


def test_means_erased_while_waiting_are_resent_as_released(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    import optuna

    import optuna_fedbo.core.fedpne.client as client
    from optuna_fedbo.samplers._fed_pne import FedPNESampler

    url = f"sqlite:///{tmp_path / 'fed.db'}"
    fed = Federation.create(
        f"erased-{uuid.uuid4().hex[:8]}", search_space=SPACE, n_clients=2, storage=url,
        protocol=CONFIG,
    )  # fmt: skip
    sampler = FedPNESampler(fed, "c0", phase_timeout=0.0, on_timeout="best", poll_interval=0.01)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    phase = fed.channel.initial_phase
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=phase.budget)
    released = json.loads(fed.read_upload(0, "c0"))["means"]
    fed.storage.delete_study(fed.storage.get_study_id_from_name(fed.store.uploads_study_name(0)))
    draws: list[int] = []
    privatize = client.privatize_rewards
    monkeypatch.setattr(
        client, "privatize_rewards", lambda r, s, g=None: draws.append(1) or privatize(r, s, g)
    )
    monkeypatch.setattr(sampler._erasures, "_checked", [-math.inf, -math.inf])  # checks due
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=1)  # waits: re-sends
    fed.store.read_uploads(0)  # (forgets the deleted study's id)
    assert json.loads(fed.read_upload(0, "c0"))["means"] == released and draws == []

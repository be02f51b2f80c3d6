"""A Fed-PNE site is a client_id and a study: its workers are one participant (issue 29).

Two workers of one site (two samplers, two leases, one study) pull the phase's schedule between
them, each slot once, whatever the order of their asks and tells; the site uploads one set of
node means pooling both; a worker killed mid-pull frees its slot (the takeover fails its trial)
and the other pulls it; two workers picking one free slot at the same moment never both keep it
(the claim's tickets, injected interleavings). One real-process test over SQLite: two worker
processes of one site and one other site.

This file is also the worker program: ``python THIS_FILE STORAGE NAME CLIENT_ID STUDY_STORAGE
N_TRIALS SLEEP``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys
import time


def _worker(storage: str, name: str, client_id: str, studies: str, n_trials: int, pause: float):
    import optuna

    from optuna_fedbo.federation import Federation
    from optuna_fedbo.samplers._fed_pne import FedPNESampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = FedPNESampler(
        Federation.load(name, storage),
        client_id,
        phase_timeout=0.3,
        on_timeout="best",
        poll_interval=0.02,
        seed=os.getpid(),
    )
    study = optuna.load_study(study_name=client_id, storage=studies, sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        time.sleep(pause)
        return 1.0 - (trial.suggest_float("x", 0.0, 1.0) - 0.3) ** 2

    study.optimize(objective, n_trials=n_trials)
    print(json.dumps({"epoch": sampler._lease.epoch}), flush=True)


if __name__ == "__main__":
    _worker(*sys.argv[1:5], int(sys.argv[5]), float(sys.argv[6]))
    sys.exit(0)


# ------------------------------------------------------------------------------ the tests
import itertools  # noqa: E402
import uuid  # noqa: E402

import numpy as np  # noqa: E402
import optuna  # noqa: E402
from optuna.distributions import FloatDistribution  # noqa: E402
from optuna.trial import TrialState  # noqa: E402
import pytest  # noqa: E402

from optuna_fedbo.federation import Federation  # noqa: E402
from optuna_fedbo.federation import FederationServer  # noqa: E402
from optuna_fedbo.federation import FedPNEConfig  # noqa: E402
import optuna_fedbo.samplers._bakery as bakery  # noqa: E402
from optuna_fedbo.samplers._fed_pne import FedPNEPhaseTimeout  # noqa: E402
from optuna_fedbo.samplers._fed_pne import FedPNESampler  # noqa: E402
import optuna_fedbo.samplers._pne_slots as slots_module  # noqa: E402
from optuna_fedbo.samplers._site_state import WORKER_ATTR  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}
SPACE = {"x": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _federation(storage: str | None = None, **protocol) -> Federation:
    config = FedPNEConfig(
        **{"horizon": 40, "variant": "paper", "value_range": [0.0, 1.0], **protocol}
    )
    name = f"pne-site-{next(_names)}-{uuid.uuid4().hex[:6]}"
    return Federation.create(
        name, search_space=SPACE, n_clients=2, protocol=config, seed=1, storage=storage
    )


def _workers(fed: Federation, monkeypatch, n: int = 2) -> list[optuna.Study]:
    """``n`` workers of site c0 in this process: each its own sampler and lease (another
    process's identity), all on one study."""
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(study_name="c0", storage=storage, direction="maximize")
    studies = []
    for k in range(n):
        monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", f"w{k}".encode())
        sampler = FedPNESampler(fed, "c0", phase_timeout=0.0, poll_interval=0.01, seed=k)
        studies.append(optuna.load_study(study_name="c0", storage=storage, sampler=sampler))
    assert len({s.sampler._lease.epoch for s in studies}) == n
    return studies


def _ask(study: optuna.Study) -> optuna.Trial:
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    return trial


def _value(trial: optuna.Trial) -> float:
    return 1.0 - (trial.params["x"] - 0.3) ** 2


def _pulls(study: optuna.Study, phase: int = 1) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.trials if t.system_attrs.get("fedpne:phase") == phase]


def _expected_means(study: optuna.Study, phase) -> dict[str, float]:
    schedule = phase.schedule()
    rewards: dict[str, list[float]] = {}
    for t in _pulls(study, phase.index):
        if t.state == TrialState.COMPLETE:
            assert t.system_attrs["fedpne:node"] == schedule[t.system_attrs["fedpne:slot"]].key
            rewards.setdefault(t.system_attrs["fedpne:node"], []).append(t.value)
    return {key: float(np.mean(values)) for key, values in rewards.items()}


def test_two_workers_of_a_site_pull_each_slot_once_and_upload_one_pooled_release(
    monkeypatch,
) -> None:
    fed = _federation()
    phase = fed.channel.initial_phase
    assert phase.budget >= 6
    one, two = _workers(fed, monkeypatch)
    # Interleaved: both hold a running pull at every step, tells in either order.
    running = {0: _ask(one), 1: _ask(two)}
    for step in range(phase.budget - 2):
        k = step % 2 if step % 3 else 1 - step % 2
        (one, two)[k].tell(running[k], _value(running[k]))
        running[k] = _ask((one, two)[k])
    for k in (1, 0):
        (one, two)[k].tell(running[k], _value(running[k]))
    pulls = _pulls(one)
    assert sorted(t.system_attrs["fedpne:slot"] for t in pulls) == list(range(phase.budget))
    assert all(t.state == TrialState.COMPLETE for t in pulls)
    assert {t.system_attrs[WORKER_ATTR] for t in pulls} == {
        s.sampler._lease.epoch for s in (one, two)
    }
    # One participant: its upload pools the pulls of both workers (plain Fed-PNE: exact means).
    uploaded = json.loads(fed.read_upload(0, "c0"))["means"]
    assert uploaded == pytest.approx(_expected_means(one, phase), abs=1e-12)
    # Both workers then wait for phase 2 (no slot left): none pulls again.
    with pytest.raises(FedPNEPhaseTimeout):
        _ask(two)
    assert len(_pulls(one)) == phase.budget


def test_a_worker_killed_mid_pull_frees_its_slot_for_the_other(monkeypatch) -> None:
    monkeypatch.setattr("optuna_fedbo.samplers._site_state.CHECK_INTERVAL", 0.0)
    fed = _federation()
    phase = fed.channel.initial_phase
    alive, doomed = _workers(fed, monkeypatch)
    first = _ask(alive)
    killed = _ask(doomed)  # slot 1: its worker dies before the tell
    assert doomed.trials[killed.number].system_attrs["fedpne:slot"] == 1
    doomed.sampler._abandon()  # the process is gone: its lease is lost
    alive.tell(first, _value(first))
    for _ in range(phase.budget - 1):
        trial = _ask(alive)  # the first one fails the dead worker's trial, then pulls slot 1
        alive.tell(trial, _value(trial))
    assert alive.trials[killed.number].state == TrialState.FAIL
    done = [t for t in _pulls(alive) if t.state == TrialState.COMPLETE]
    assert sorted(t.system_attrs["fedpne:slot"] for t in done) == list(range(phase.budget))
    assert done[1].system_attrs["fedpne:slot"] == 1  # the freed slot, pulled next
    uploaded = json.loads(fed.read_upload(0, "c0"))["means"]
    assert uploaded == pytest.approx(_expected_means(alive, phase), abs=1e-12)


def test_a_restarted_worker_carries_on_from_the_study_and_does_not_upload_again(
    monkeypatch,
) -> None:
    fed = _federation(dp_epsilon=2.0, dp_delta=1e-5)
    phase = fed.channel.initial_phase
    one, two = _workers(fed, monkeypatch)
    for _ in range(phase.budget - 1):
        trial = _ask(one)
        one.tell(trial, _value(trial))
    one.sampler._abandon()
    # A new worker (a restart: new sampler, new lease) pulls the one slot left and uploads.
    monkeypatch.setattr("optuna_fedbo.federation.lease_record._SECRET", b"restarted")
    restarted = optuna.load_study(
        study_name="c0",
        storage=one._storage,
        sampler=FedPNESampler(fed, "c0", phase_timeout=0.0, seed=5),
    )
    last = _ask(restarted)
    restarted.tell(last, _value(last))
    assert restarted.trials[-1].system_attrs["fedpne:slot"] == phase.budget - 1
    sent = fed.store.read_uploads(0)["c0"]
    # The other worker finds the phase done and uploaded: it waits, it sends nothing.
    with pytest.raises(FedPNEPhaseTimeout):
        _ask(two)
    assert fed.store.read_uploads(0)["c0"] == sent
    assert sorted(t.system_attrs["fedpne:slot"] for t in _pulls(one)) == list(range(phase.budget))


# ------------------------------------------------------------------ claim interleavings
def _claim_setup(monkeypatch):
    fed = _federation()
    phase = fed.channel.initial_phase
    (study,) = _workers(fed, monkeypatch, n=1)
    tickets = itertools.count(100)
    slots = slots_module.PhaseSlots(
        study.sampler._tag, fed.protocol.reward, lambda: next(tickets), 0.0
    )
    rival, mine = study.ask(), study.ask()  # two running trials of the site
    return study, phase, slots, rival, mine


def _set_claim(study, trial, phase, slot, ticket) -> None:
    claim = {"config": study.sampler._tag, "phase": phase.index, "slot": slot, "ticket": ticket}
    study._storage.set_trial_system_attr(trial._trial_id, slots_module.CLAIM_ATTR, claim)


def test_a_rival_still_choosing_is_waited_for_and_its_smaller_ticket_keeps_the_slot(
    monkeypatch,
) -> None:
    study, phase, slots, rival, mine = _claim_setup(monkeypatch)
    _set_claim(study, rival, phase, 0, None)  # the rival wrote its intent on slot 0 ...
    waits = []

    def rival_draws(seconds: float) -> None:  # ... and writes its ticket, drawn earlier (5)
        waits.append(seconds)
        claim = study._storage.get_trial(rival._trial_id).system_attrs[slots_module.CLAIM_ATTR]
        _set_claim(study, rival, phase, claim["slot"], 5)

    monkeypatch.setattr(bakery.time, "sleep", rival_draws)
    # Slot 0 is taken by the rival's intent: this trial claims slot 1 at once.
    assert slots.claim(study, mine, phase) == (1, 0) and not waits
    # The same race on slot 1 (both chose it): this trial waits for the rival's ticket.
    _set_claim(study, rival, phase, 1, None)
    assert slots._won(study, phase, 1, 100, mine._trial_id) is False
    assert waits  # it did wait for the rival's ticket, then gave way to the smaller one
    _set_claim(study, rival, phase, 1, 500)  # a larger ticket gives way to this trial's
    assert slots._won(study, phase, 1, 100, mine._trial_id) is True
    # The rival, reading this trial's smaller ticket, gives way.
    assert slots._won(study, phase, 1, 500, rival._trial_id) is False


def test_a_claim_the_rival_did_not_see_draws_a_larger_ticket_and_gives_way(monkeypatch) -> None:
    study, phase, slots, rival, mine = _claim_setup(monkeypatch)
    # The rival read slot 0 as free and wrote its intent; this trial claims slot 0 in the gap
    # between the rival's intent and its ticket: it waits for the rival's ticket ...
    _set_claim(study, rival, phase, 0, None)
    state = {"drawn": False}

    def rival_ticket(seconds: float) -> None:
        if not state["drawn"]:
            state["drawn"] = True
            _set_claim(study, rival, phase, 0, 150)  # drawn after this trial's (100)

    monkeypatch.setattr(bakery.time, "sleep", rival_ticket)
    assert slots._won(study, phase, 0, 100, mine._trial_id) is True
    _set_claim(study, mine, phase, 0, 100)
    assert slots._won(study, phase, 0, 150, rival._trial_id) is False  # never both


def test_a_rival_that_never_draws_its_ticket_does_not_block_the_claim(monkeypatch) -> None:
    study, phase, slots, rival, mine = _claim_setup(monkeypatch)
    _set_claim(study, rival, phase, 0, None)  # its worker died between intent and ticket
    clock = itertools.count(0.0, 4.0)
    monkeypatch.setattr(bakery.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(bakery.time, "sleep", lambda s: None)
    assert slots._won(study, phase, 0, 100, mine._trial_id) is True  # after CHOOSING_WAIT


# --------------------------------------------------------------------- real processes
def test_two_worker_processes_of_a_site_and_another_site_over_sqlite(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'fed.db'}"
    studies = f"sqlite:///{tmp_path / 'sites.db'}"
    fed = _federation(storage)
    budget = fed.channel.initial_phase.budget
    for client in ("c0", "c1"):
        optuna.create_study(study_name=client, storage=studies, direction="maximize")
    half = budget // 2 + 2  # a few more than half each: the faster one pulls more
    runs = [(c, n) for c, n in (("c0", half), ("c0", half), ("c1", budget))]
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, storage, fed.name, c, studies, str(n), "0.05"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )  # fmt: skip
        for c, n in runs
    ]
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0 and "Traceback" not in err, err[-3000:]
    site = optuna.load_study(study_name="c0", storage=studies)
    pulls = [t for t in _pulls(site) if t.state == TrialState.COMPLETE]
    assert sorted(t.system_attrs["fedpne:slot"] for t in pulls) == list(range(budget))
    assert len({t.system_attrs[WORKER_ATTR] for t in pulls}) == 2  # both workers pulled
    fed = Federation.load(fed.name, storage)
    phase = fed.channel.initial_phase
    uploaded = json.loads(fed.read_upload(0, "c0"))["means"]
    assert uploaded == pytest.approx(_expected_means(site, phase), abs=1e-12)
    report = FederationServer(fed).step()
    assert report is not None and fed.channel.view().phase.index == 2


def test_two_workers_uploading_one_dp_phase_at_once_send_one_release(monkeypatch) -> None:
    import optuna_fedbo.samplers._fed_pne as pne

    fed = _federation(dp_epsilon=2.0, dp_delta=1e-5)
    phase = fed.channel.initial_phase
    one, two = _workers(fed, monkeypatch)
    for _ in range(phase.budget):
        trial = _ask(one)
        one.tell(trial, _value(trial))
    fed.storage.delete_study(fed.storage.get_study_id_from_name(fed.store.uploads_study_name(0)))
    fed.store._forget(fed.store.uploads_study_name(0))
    # Its upload erased and no release kept yet (as when two workers finish the phase at
    # once): both noise the rewards; the second to keep its release sends the first one's.
    from optuna_fedbo.federation.fedpne import releases

    releases._MEMORY.clear()
    noise = pne.local_node_means
    done = one.sampler._slots.done(one, phase)

    calls = []

    def two_at_once(*args, **kwargs):
        calls.append(1)
        monkeypatch.setattr(pne, "local_node_means", noise)
        two.sampler._ensure_uploaded(two, phase, done)  # the other worker, in between
        return noise(*args, **kwargs)

    monkeypatch.setattr(pne, "local_node_means", two_at_once)
    one.sampler._ensure_uploaded(one, phase, done)
    kept = releases.ReleaseBook(fed, "c0").recall(phase)
    assert calls == [1] and kept is not None
    assert json.loads(fed.read_upload(0, "c0"))["means"] == kept


def test_a_worker_waiting_for_the_last_pull_fails_a_dead_workers_and_pulls_it(
    monkeypatch,
) -> None:
    import optuna_fedbo.samplers._fed_pne as pne

    monkeypatch.setattr("optuna_fedbo.samplers._site_state.CHECK_INTERVAL", 0.0)
    fed = _federation()
    phase = fed.channel.initial_phase
    alive, doomed = _workers(fed, monkeypatch)
    alive.sampler._waits._limit = ("phase_timeout", 30.0)  # waits instead of raising at once
    for _ in range(phase.budget - 1):
        trial = _ask(alive)
        alive.tell(trial, _value(trial))
    held = _ask(doomed)  # the last pull, held by a worker that dies while the other waits
    sleeps = []

    def dies(seconds: float) -> None:
        if not sleeps:
            doomed.sampler._abandon()
        sleeps.append(seconds)

    monkeypatch.setattr(pne.time, "sleep", dies)
    last = _ask(alive)
    alive.tell(last, _value(last))
    assert sleeps and len(sleeps) < 5  # it waited, then took the pull over
    assert alive.trials[held.number].state == TrialState.FAIL
    assert alive.trials[-1].system_attrs["fedpne:slot"] == phase.budget - 1
    uploaded = json.loads(fed.read_upload(0, "c0"))["means"]
    assert uploaded == pytest.approx(_expected_means(alive, phase), abs=1e-12)

"""Signed leases: whoever writes the storage can neither lock a site out, nor stall rounds, nor
end ``serve``, with forged or replayed lease records; and no lease shows a host or pid.

The attacker holds the storage URL only: it writes with the plain Optuna storage API, and its
forgeries are as good as they get (well-formed records signed with a key of its own, progress
fields sealed to the server's public key). The attacks run on real server and participant
processes over SQLite.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
import re
import socket
import threading
import time
from types import SimpleNamespace

import optuna
from optuna.distributions import FloatDistribution
from optuna.exceptions import DuplicatedStudyError
from optuna.study import StudyDirection
from test_lifecycle_multiprocess import _federation
from test_lifecycle_multiprocess import _finish
from test_lifecycle_multiprocess import _participant
from test_lifecycle_multiprocess import _server
from test_lifecycle_multiprocess import _wait_for
from test_lifecycle_multiprocess import N_INIT

import optuna_fedbo as fb
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.lease import lease_book
from optuna_fedbo.federation.lease import LeaseBook
import optuna_fedbo.federation.lease_book as book_module
from optuna_fedbo.federation.lease_record import sign_lease

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: Short leases and trials, in lock-step. The sync timeout is long (a busy machine can take half a
#: minute to start a process) since every wait ends with a broadcast, both sites running as many
#: trials, but where a test bounds a lone wait itself.
FAST = ("--lease-ttl", "2", "--sleep", "0.05", "--synchronous", "--sync-timeout", "120")


class Attacker:
    """Someone holding the storage URL: writes lease records with the plain storage API."""

    def __init__(self, storage: str, name: str) -> None:
        self.storage = optuna.storages.RDBStorage(storage)
        self.name = name
        self.federation = Federation.load(name, storage)  # public information only is used

    def _study(self, study_name: str) -> int:
        try:
            return self.storage.create_new_study([StudyDirection.MINIMIZE], study_name)
        except DuplicatedStudyError:
            return self.storage.get_study_id_from_name(study_name)

    def forge(self, client: str, *, state: str, ttl: float, epoch: int = 1, **private) -> str:
        """A well-formed lease record of ``client``, signed with the attacker's own key."""
        fed = self.federation
        own = ParticipantKey.generate(fed.federation_id, client, fed.fingerprint)
        return sign_lease(fed.trust, own, epoch=epoch, state=state, ttl=ttl, private=private)

    def read(self, client: str) -> str | None:
        study_id = self._study(f"{self.name}:fedbo:leases")
        return self.storage.get_study_system_attrs(study_id).get(f"l:{client}")

    def write(self, client: str, text: str, *, epoch: int | None = None) -> None:
        """Write ``text`` as ``client``'s lease record (and into an epoch's study)."""
        study_id = self._study(f"{self.name}:fedbo:leases")
        self.storage.set_study_system_attr(study_id, f"l:{client}", text)
        if epoch is not None:
            epoch_study = self._study(f"{self.name}:fedbo:lease:{epoch:06d}:{client}")
            self.storage.set_study_system_attr(epoch_study, "lease", text)

    def keep_writing(self, writes: dict[str, str]) -> threading.Event:
        """Write ``writes`` (client -> record) again and again until the event is set."""
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                for client, text in writes.items():
                    try:
                        self.write(client, text)
                    except Exception:  # a locked database: write again next time
                        pass
                stop.wait(0.2)

        threading.Thread(target=run, daemon=True).start()
        return stop


def _last_json(out: str) -> dict:
    return json.loads(out.splitlines()[-1])


def test_a_forged_lease_does_not_lock_a_real_site_out(tmp_path) -> None:
    storage, name = _federation(tmp_path, n_clients=2)
    attacker = Attacker(storage, name)
    # A live-looking lease of site-0 for ever, in both places, and epoch studies 2-5 made first.
    forged = attacker.forge("site-0", state="active", ttl=1e9, host="elsewhere", pid=1)
    attacker.write("site-0", forged, epoch=1)
    for epoch in range(2, 6):
        attacker._study(f"{name}:fedbo:lease:{epoch:06d}:site-0")
    out, err = _finish(_participant(storage, name, "site-0", N_INIT + 1, "--lease-ttl", "2"))
    assert "ParticipantBusyError" not in err
    assert _last_json(out)["counts"]["initial"] == N_INIT  # it ran its study
    assert err.count("Ignoring a lease record of 'site-0'") == 1, err  # warned, once
    state = lease_book(Federation.load(name, storage)).states()["site-0"]
    assert state.status == "finished" and state.epoch == 6


def test_a_forged_trial_duration_does_not_stall_rounds(tmp_path) -> None:
    storage, name = _federation(tmp_path, n_clients=3)  # min_uploads "auto": 2 of 3
    Federation.load(name, storage).join("site-2")  # enrolled, never runs
    attacker = Attacker(storage, name)
    # site-2 "runs" trials of a million seconds: the auto round timeout would be 3e6 s.
    forged = attacker.forge("site-2", state="active", ttl=1e9, trial_seconds=1e6)
    attacker.write("site-2", forged, epoch=1)
    server = _server(storage, name, "--timeout", "120")
    try:
        workers = [_participant(storage, name, f"site-{i}", N_INIT + 1, *FAST) for i in (0, 1)]
        outcomes = [_finish(process) for process in workers]
    finally:
        server.kill()
    server_out, server_err = _finish(server)
    rounds = re.findall(r"round (\d+): (\d+) contributors \((\w+)\)", server_out)
    assert ("2", "timeout") in {(n, reason) for _, n, reason in rounds}, server_out
    for out, err in outcomes:
        assert _last_json(out)["counts"]["federated"] >= 1, err[-2000:]
    assert "Ignoring a lease record of 'site-2'" in server_err


def test_forged_finished_leases_do_not_end_serve(tmp_path) -> None:
    storage, name = _federation(tmp_path, n_clients=2)
    federation = Federation.load(name, storage)
    for client in ("site-0", "site-1"):
        federation.join(client)
    attacker = Attacker(storage, name)
    forged = {c: attacker.forge(c, state="finished", ttl=0.01) for c in ("site-0", "site-1")}
    for client, text in forged.items():
        attacker.write(client, text, epoch=1)
    stop = attacker.keep_writing(forged)  # and over the real ones, all along
    try:
        server = _server(storage, name, "--round-timeout", "1")
        workers = [_participant(storage, name, f"site-{i}", N_INIT + 2, *FAST) for i in (0, 1)]
        outcomes = [_finish(process) for process in workers]
        server_out, server_err = _finish(server)  # ends by itself once both really finished
    finally:
        stop.set()
    assert server.returncode == 0, server_err[-3000:]
    assert re.search(r"round \d+: \d+ contributors", server_out), server_out
    for i, (out, err) in enumerate(outcomes):
        counts = _last_json(out)["counts"]
        assert counts["federated"] >= 1, err[-2000:]
        # serve ended after the participant's real end: its summary row has all its trials.
        assert re.search(rf"site-{i}\s+finished\s+{N_INIT + 2}\s", server_out), server_out


def test_a_replayed_old_lease_neither_locks_out_nor_ends_serve(tmp_path) -> None:
    storage, name = _federation(tmp_path, n_clients=2)
    attacker = Attacker(storage, name)
    # site-0's first session: the attacker copies its live record mid-run and its finished one.
    first = _participant(storage, name, "site-0", N_INIT + 2, "--lease-ttl", "2", "--sleep", "0.3")
    _wait_for(lambda: attacker.read("site-0") is not None, "site-0's first lease")
    old_live = attacker.read("site-0")
    _finish(first)
    old_finished = attacker.read("site-0")
    assert json.loads(old_live)["body"]["state"] == "active"
    assert json.loads(old_finished)["body"]["state"] == "finished"
    # The old live record is written back in both places once it has expired: the site's next
    # process is not locked out ...
    expiry = json.loads(old_live)["body"]["time"] + 2.0
    _wait_for(lambda: time.time() > expiry + 0.5, "the old live record to expire")
    attacker.write("site-0", old_live, epoch=1)
    server = _server(storage, name, "--round-timeout", "1")
    # (Once site-1 has ended, site-0's next wait for a round cannot end with a broadcast: a
    # short sync timeout bounds it; the two start together, so round 0 closes well before.)
    second = _participant(storage, name, "site-0", N_INIT + 5, *FAST, "--sync-timeout", "10")
    other = _participant(storage, name, "site-1", N_INIT + 1, *FAST)
    claimed = lambda: json.loads(attacker.read("site-0"))["body"]["epoch"] == 2  # noqa: E731
    _wait_for(lambda: second.poll() is not None or claimed(), "site-0's new lease")
    # ... and the old finished record is written back all along while both sites run: serve
    # must go on until site-0's second session has really finished (site-1 ends much sooner).
    stop = attacker.keep_writing({"site-0": old_finished})
    try:
        out, err = _finish(second)
        _finish(other)
        server_out, server_err = _finish(server)
    finally:
        stop.set()
    assert "ParticipantBusyError" not in err and _last_json(out)["counts"]["federated"] >= 1
    assert server.returncode == 0, server_err[-3000:]
    # The site's row counts the trials of both its sessions (each a worker of the site).
    assert re.search(rf"site-0\s+finished\s+{2 * N_INIT + 7}\s", server_out), server_out
    assert re.search(rf"site-1\s+finished\s+{N_INIT + 1}\s", server_out), server_out


def test_a_lease_in_the_storage_reveals_no_host_pid_or_trial_times(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path / 'seal.db'}"
    fed = Federation.create(
        "seal", search_space={"x": FloatDistribution(0.0, 1.0)}, n_clients=1, storage=storage,
        protocol=FTSConfig(n_features=8, n_init=1, min_contributors=1), seed=0,
    )  # fmt: skip
    sampler = fb.FedSampler(fed, client_id="solo", seed=0, lease_ttl=30.0, n_candidates=16)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=3)
    sampler._lease.renew()  # the counts and trial durations of the 3 trials go in
    sampler.finish()
    # Everything a lease left in the storage, read as anyone with the URL can.
    book = LeaseBook(Federation.load("seal", storage))
    texts = [book.records()["solo"], book._epoch_attrs("solo", 1)["lease"]]
    hostname, pid = socket.gethostname(), os.getpid()
    for text in texts:
        body = json.loads(text)["body"]
        # In clear: who, when, for how long, which state; host, pid and progress are sealed.
        assert set(body) == {"client", "epoch", "seq", "time", "ttl", "state", "token", "sealed"}
        clear = [v for k, v in body.items() if k != "sealed"]
        assert hostname not in clear and pid not in clear and str(pid) not in clear
    # The server (this process holds its keys) opens them.
    state = lease_book(fed).states()["solo"]
    assert (state.host, state.pid) == (hostname, pid)
    assert state.counts == sampler.counts.to_dict() and state.trial_seconds is not None


# ---------------------------------------------------------------------- in one process
def _fed(tmp_path: Path, n_clients: int = 2) -> Federation:
    return Federation.create(
        f"lt-{tmp_path.name[-12:]}", search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=n_clients, storage=f"sqlite:///{tmp_path / 'l.db'}",
        protocol=FTSConfig(n_features=8, n_init=1), seed=0,
    )  # fmt: skip


def test_a_copied_or_unenrolled_lease_is_ignored_with_one_warning(
    tmp_path, propagate, caplog
) -> None:
    fed = _fed(tmp_path)
    for client in ("a", "b"):
        fed.join(client)
    lease = fed.lease("a", ttl=30.0)
    attacker = Attacker(f"sqlite:///{tmp_path / 'l.db'}", fed.name)
    attacker.write("b", attacker.read("a"))  # a's genuine record, copied under b
    attacker.write("mallory", attacker.forge("mallory", state="active", ttl=1e9))
    book = LeaseBook(Federation.load(fed.name, f"sqlite:///{tmp_path / 'l.db'}"))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            states = book.states()
    assert set(states) == {"a"}  # b has no record of its own; mallory is nobody
    text = caplog.text
    assert text.count("Ignoring a lease record of 'b'") == 1
    assert "names another participant (a copy)" in text or "not signed by" in text
    assert text.count("not enrolled in federation") == 1
    lease.release()


def test_a_departure_counts_for_serve_only_if_witnessed_or_left_for_half_a_ttl(
    tmp_path, monkeypatch
) -> None:
    fed = _fed(tmp_path)
    fed.join("a")
    fed.join("b")
    now = [1000.0]
    clock = SimpleNamespace(time=time.time, sleep=time.sleep, monotonic=lambda: now[0])
    monkeypatch.setattr(book_module, "time", clock)
    witness = LeaseBook(fed)
    lease_a = fed.lease("a", ttl=30.0)
    assert witness.states()["a"].status == "active"  # seen live ...
    lease_a.release()
    assert witness.departed(["a"])  # ... then finished: witnessed, it counts at once
    fed.lease("b", ttl=30.0).release()
    late = LeaseBook(fed)  # a reader that first sees b already finished (maybe an old copy)
    assert late.states()["b"].status == "finished" and not late.departed(["b"])
    now[0] += 14.9
    assert not late.departed(["b"])
    now[0] += 0.2  # half the ttl: a live b would have written a heartbeat since
    assert late.departed(["b"])


def test_a_reader_keeps_the_newest_record_and_ignores_a_replayed_older_one(tmp_path) -> None:
    fed = _fed(tmp_path)
    fed.join("a")
    url = f"sqlite:///{tmp_path / 'l.db'}"
    attacker = Attacker(url, fed.name)
    first = fed.lease("a", ttl=30.0)
    first.release()
    old_finished = attacker.read("a")
    book = LeaseBook(Federation.load(fed.name, url))
    assert book.states()["a"].status == "finished"
    second = fed.lease("a", ttl=30.0)  # the same process takes part again: a new record
    assert book.states()["a"].status == "active"
    attacker.write("a", old_finished)
    assert book.states()["a"].status == "active"  # the replay changes nothing ...
    # ... and a fresh reader (a new server, `status`) finds the newer one in its epoch's study.
    assert LeaseBook(Federation.load(fed.name, url)).states()["a"].status == "active"
    assert not LeaseBook(Federation.load(fed.name, url)).departed(["a"])
    # Written back in both places, the old record still changes nothing for a reader that has
    # seen the newer one (a fresh reader gives it half a ttl: see the test above).
    attacker.write("a", old_finished, epoch=1)
    assert book.states()["a"].status == "active" and not book.departed(["a"])
    second.release()


def test_the_round_timeout_ignores_a_forged_trial_duration(tmp_path) -> None:
    fed = _fed(tmp_path, n_clients=3)
    for client in ("a", "b"):
        fed.join(client)
    server = FederationServer(fed)
    leases = [fed.lease("a", ttl=30.0, public=lambda: {"trial_seconds": 0.5})]
    attacker = Attacker(f"sqlite:///{tmp_path / 'l.db'}", fed.name)
    attacker.write("b", attacker.forge("b", state="active", ttl=1e9, trial_seconds=1e6))
    assert server.current_round_timeout() == 2.0  # a's 0.5 s, floored; b's forgery ignored
    leases[0].release()

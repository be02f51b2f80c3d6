"""Stale records and damage (issue 26, items 5 and 6), on real SQLite files: uploads written ahead
of their round never count, a deleted uploads study is recreated and the round goes on, a deleted
main study or configuration is one line naming what is missing, and two servers never share an
epoch whatever is deleted."""

from __future__ import annotations

import itertools
import json
import logging
import os
from pathlib import Path
import re
import shutil
import subprocess
import sys
import time
import uuid

import numpy as np
from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationDamagedError
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import FTSConfig
from optuna_fedbo.federation import ServerSupersededError
from optuna_fedbo.federation._codec import split_frame
from optuna_fedbo.federation._damage import reopen_uploads
from optuna_fedbo.federation.fts.messages import encode_upload
from optuna_fedbo.federation.keys import ServerKeys

M = 6
SPACE = {"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)}
_names = itertools.count()


def _federation(tmp_path: Path, n_clients: int = 2, min_contributors: int = 2) -> Federation:
    fed = Federation.create(
        f"damage-{next(_names)}",
        search_space=SPACE,
        n_clients=n_clients,
        storage=f"sqlite:///{tmp_path / 'fed.db'}",
        protocol=FTSConfig(
            n_features=M, n_init=1, aggregation="weighted", min_contributors=min_contributors
        ),
        seed=4,
        key_dir=tmp_path / "keys",
    )
    for i in range(n_clients):
        fed.join(f"c{i}")
    return fed


def _omega(i: int) -> np.ndarray:
    return np.linspace(-1.0, 1.0, M) * (i + 1)


def _upload(fed: Federation, client: str, i: int) -> int:
    return fed.upload(client, _omega(i), n_observations=3, iteration=1)


def _payload(fed: Federation, client: str, round_index: int) -> str:
    return encode_upload(
        config_hash=fed.config_hash,
        round_index=round_index,
        client_id=client,
        omega=_omega(7),
        n_observations=3,
        iteration=round_index,
    )


# ------------------------------------------------------------------- uploads ahead of time
def test_an_upload_written_ahead_of_its_round_never_counts(tmp_path: Path, caplog) -> None:
    fed = _federation(tmp_path, min_contributors=1)  # round 2 closes with c1 alone
    server = FederationServer(fed, discard_uploads=False)
    for i in range(2):
        _upload(fed, f"c{i}", i)
    assert server.step().round == 0  # round 1 is open
    # Someone with the URL creates round 2's uploads study ahead of time ...
    fed.store.open_uploads(2)
    # ... the participant's own client refuses to send there, and says why ...
    with pytest.raises(ValueError, match="Round 2 of federation .* is not open yet"):
        fed.send_upload("c0", 2, _payload(fed, "c0", 2))
    # ... and c0, signing its own upload for round 2 by hand (bound to the opening it can see,
    # round 1's), writes it there anyway.
    key = fed._participant_key("c0")
    opening = fed.store.latest()["digest"]
    ahead = fed.trust.seal_upload(key, 2, 1, _payload(fed, "c0", 2), opening)
    fed.store.write_upload(2, "c0", ahead)
    for i in range(2):
        _upload(fed, f"c{i}", i)
    assert server.step().round == 1  # round 2 opens with c0's early upload in it
    assert "c0" in fed.store.read_uploads(2)
    _upload(fed, "c1", 1)
    with caplog.at_level(logging.WARNING):
        report = server.step(force=True)
    assert report.round == 2 and report.contributors == ("c1",)
    assert "written before round 2 opened" in dict(report.rejected)["c0"]
    # The participant re-sends through its client, into the open round: that one counts.
    assert _upload(fed, "c0", 0) == 3
    _upload(fed, "c1", 1)
    assert server.step().contributors == ("c0", "c1")


def test_an_upload_to_a_closed_round_is_refused_by_the_client(tmp_path: Path) -> None:
    fed = _federation(tmp_path)
    server = FederationServer(fed)
    for i in range(2):
        _upload(fed, f"c{i}", i)
    server.step()
    with pytest.raises(KeyError, match="Round 0 of .* is closed"):
        fed.send_upload("c0", 0, _payload(fed, "c0", 0))


def test_a_participant_resends_into_an_uploads_study_the_server_created_again(
    tmp_path: Path,
) -> None:
    fed = _federation(tmp_path)
    _upload(fed, "c0", 0)  # this process now knows round 0's uploads study by its id
    # A newer study exists, so the one created again gets a new id (SQLite reuses only the
    # highest; PostgreSQL never reuses one) ...
    fed.storage.create_new_study([StudyDirection.MINIMIZE], f"other-{uuid.uuid4().hex[:8]}")
    study_name = fed.store.uploads_study_name(0)
    fed.storage.delete_study(fed.storage.get_study_id_from_name(study_name))
    # ... by the server's own process, before the participant re-sends.
    server_side = Federation.load(fed.name, fed.storage, key_dir=tmp_path / "keys")
    assert reopen_uploads(server_side.store, 0)
    # The participant's re-send lands in the new study, and the round closes with it.
    _upload(fed, "c0", 0)
    _upload(fed, "c1", 1)
    assert set(server_side.store.read_uploads(0)) == {"c0", "c1"}
    assert FederationServer(server_side).step().contributors == ("c0", "c1")


# ---------------------------------------------------------------------- real processes
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "OMP_NUM_THREADS": "1"}
WORKER = Path(__file__).with_name("_federation_worker.py")


def _serve(url: str, name: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "optuna_fedbo.federation.cli", "serve", "--storage", url,
         "--name", name, "--poll-interval", "0.1", "--timeout", "150", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip


def _created(tmp_path: Path, n_clients: int) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'fed.db'}"
    name = f"damage-{uuid.uuid4().hex[:8]}"
    Federation.create(
        name,
        search_space=SPACE,
        n_clients=n_clients,
        storage=url,
        protocol=FTSConfig(n_features=12, n_init=2, n_subregions=2),
        seed=1,
    )
    return url, name


def _wait(condition, what: str, timeout: float = 120.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_deleted_uploads_study_is_created_again_and_the_round_goes_on(tmp_path: Path) -> None:
    url, name = _created(tmp_path, 3)
    fed = Federation.load(name, url)
    # Rounds wait for all three sites, and site-2 starts late: round 0 cannot close before the
    # deletion, whatever the timing.
    server = _serve(url, name, "--max-rounds", "5", "--round-timeout", "none")

    def worker(i: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(WORKER), url, name, f"site-{i}", "6", str(i)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        )  # fmt: skip

    def initialized(client: str) -> bool:
        return client in fed.store.read_uploads(0) and (
            split_frame(fed.read_upload(0, client))[0]["n_observations"] >= 2
        )

    workers = [worker(0), worker(1)]
    try:
        # Both early sites sent their initial designs to round 0 and wait for its broadcast;
        # then someone with the URL deletes round 0's uploads study.
        _wait(lambda: initialized("site-0") and initialized("site-1"), "the initial designs")
        study_name = fed.store.uploads_study_name(0)
        fed.storage.delete_study(fed.storage.get_study_id_from_name(study_name))
        workers.append(worker(2))
        outputs = [w.communicate(timeout=180) for w in workers]
        _, server_err = server.communicate(timeout=120)
    finally:
        for process in [*workers, server]:
            if process.poll() is None:
                process.kill()
    for process, (out, err) in zip(workers, outputs):
        assert "Traceback" not in err, err[-3000:]
        assert process.returncode == 0, (out, err[-3000:])
        assert json.loads(out.strip().splitlines()[-1])["n_trials"] == 6
    assert server.returncode == 0 and "Traceback" not in server_err, server_err[-3000:]
    # Round 0 was published with all three sites (the two early ones re-sent their lost
    # uploads), and the rounds went on.
    round_zero = [b for b in fed.store.broadcasts() if b.round == 0]
    assert [b.value for b in round_zero] == [3.0]
    assert fed.open_round() >= 3


@pytest.mark.parametrize("what", ["main study", "configuration"])
def test_a_deleted_main_study_or_configuration_is_one_line_naming_it(
    tmp_path: Path, what: str
) -> None:
    url, name = _created(tmp_path, 2)
    fed = Federation.load(name, url)
    server = _serve(url, name)
    try:
        _wait(lambda: fed.status().server is not None, "the server's heartbeat")
        main_id = fed.storage.get_study_id_from_name(name)
        if what == "main study":
            fed.storage.delete_study(main_id)
        else:
            # Optuna has no attribute deletion: the configuration goes with a copy of the main
            # study that keeps everything else.
            attrs = fed.store.main_attrs()
            fed.storage.delete_study(main_id)
            new_id = fed.storage.create_new_study([StudyDirection.MINIMIZE], name)
            for key, value in attrs.items():
                if key != "fedbo:config":
                    fed.storage.set_study_system_attr(new_id, key, value)
        _, err = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    missing = "main study" if what == "main study" else "configuration (system attribute"
    if what == "main study":  # the running server fails closed at once, in one line
        assert server.returncode == 2, err[-3000:]
        assert "Traceback" not in err and "Server step failed" not in err
        (line,) = err.strip().splitlines()
        assert line.startswith("optuna-fedbo serve: error: ") and missing in line
    with pytest.raises(FederationDamagedError, match=re.escape(f"is damaged: its {missing}")) as e:
        Federation.load(name, url)
    assert "\n" not in str(e.value) and not str(e.value).startswith("'")
    status = subprocess.run(
        [sys.executable, "-m", "optuna_fedbo.federation.cli", "status", "--storage", url,
         "--name", name],
        capture_output=True, text=True, env=ENV, timeout=120,
    )  # fmt: skip
    assert status.returncode == 2
    (line,) = status.stderr.strip().splitlines()
    assert line.startswith("optuna-fedbo status: error: ") and missing in line
    if what == "main study":  # a loaded federation's own status says it too
        with pytest.raises(FederationDamagedError, match="main study"):
            fed.status()


# ------------------------------------------------------------------------------- epochs
def _delete_epoch_records(fed: Federation) -> int:
    doomed = [s for s in fed.storage.get_all_studies() if ":fedbo:server:" in s.study_name]
    for study in doomed:
        fed.storage.delete_study(study._study_id)
    return len(doomed)


def test_deleted_epoch_records_never_let_two_servers_share_an_epoch(tmp_path: Path) -> None:
    fed = _federation(tmp_path)
    first = FederationServer(fed)
    assert _delete_epoch_records(fed) == 1
    second = FederationServer(Federation.load(fed.name, fed.storage, key_dir=tmp_path / "keys"))
    assert second.epoch > first.epoch
    with pytest.raises(ServerSupersededError):
        first.step()
    # Whatever is deleted next (the newer claim too), the older server stays stopped ...
    _delete_epoch_records(fed)
    with pytest.raises(ServerSupersededError):
        first.step(force=True)
    # ... and the newer one carries on.
    for i in range(2):
        _upload(fed, f"c{i}", i)
    assert second.step().round == 0


def test_a_server_with_a_copied_key_file_claims_above_every_signed_epoch(tmp_path: Path) -> None:
    fed = _federation(tmp_path)
    first = FederationServer(fed)
    first.announce()  # its signed heartbeat names its epoch
    _delete_epoch_records(fed)
    # The same server keys on another machine (another key directory): no shared pin.
    source = ServerKeys.path(fed.federation_id, tmp_path / "keys")
    target = ServerKeys.path(fed.federation_id, tmp_path / "elsewhere")
    target.parent.mkdir(parents=True, mode=0o700)
    shutil.copy(source, target)
    other = FederationServer(
        Federation.load(fed.name, fed.storage, key_dir=tmp_path / "elsewhere")
    )
    assert other.epoch > first.epoch
    with pytest.raises(ServerSupersededError):
        first.step()

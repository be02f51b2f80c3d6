"""The server's Shamir combinations in a pool of worker processes (``combine_seeds``): the same
seeds, in order, as pycryptodome's ``Shamir.combine`` one by one, and the same unmasked sum."""

from __future__ import annotations

from concurrent.futures import Future
import gc
import multiprocessing

import numpy as np
import pytest
import test_secagg_federation as base
from test_secagg_federation import _federation
from test_secagg_federation import _Round

from optuna_fedbo.core.secagg import sharing
from optuna_fedbo.core.secagg.client import SecAggClient
from optuna_fedbo.core.secagg.local import Identities
from optuna_fedbo.core.secagg.local import run_local_round
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.server import SecAggServer
from optuna_fedbo.core.secagg.setup import RoundSetup
from optuna_fedbo.core.secagg.sharing import combine_seeds
from optuna_fedbo.core.secagg.sharing import pool_size
from optuna_fedbo.core.secagg.sharing import split_seed
from optuna_fedbo.federation import FederationServer

capture_sum = base.capture_sum  # the fixture that keeps the unmasked sums
linux_only = pytest.mark.skipif(pool_size(64, 2) < 2, reason="worker processes are forked")


class _Spy:
    """Records the pools opened (their worker counts) around the real executor."""

    def __init__(self, real: type) -> None:
        self.real = real
        self.workers: list[int] = []
        self.options: list[dict] = []

    def __call__(self, workers: int, **kwargs: object) -> object:
        self.workers.append(workers)
        self.options.append(kwargs)
        return self.real(workers, **kwargs)


def _jobs(count: int, seed: int = 0) -> tuple[list[bytes], list[dict[int, bytes]]]:
    rng = np.random.default_rng(seed)
    secrets = [rng.bytes(16) for _ in range(count)]
    jobs = []
    for secret in secrets:
        shares = split_seed(secret, 3, 5)
        jobs.append({i + 1: shares[i] for i in (4, 1, 2)})  # any three, out of order
    return secrets, jobs


@linux_only
def test_a_pool_rebuilds_every_seed_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(sharing.ProcessPoolExecutor)
    monkeypatch.setattr(sharing, "ProcessPoolExecutor", spy)
    monkeypatch.setattr(sharing.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    secrets, jobs = _jobs(48)
    assert combine_seeds(jobs, workers=2) == secrets
    assert spy.workers == [2]  # as asked, not the three usable cores (48 jobs would take 3)
    # Forked (whatever the platform's default), and no garbage collection in the workers: an
    # object inherited from the server's process (a storage connection) is never finalised there.
    (options,) = spy.options
    assert options["mp_context"] is multiprocessing.get_context("fork")
    assert options["initializer"] is gc.disable
    assert combine_seeds(jobs[:31], workers=2) == secrets[:31]  # too few jobs for two workers
    assert spy.workers == [2]


@pytest.mark.parametrize("error", (OSError("no fork"), sharing.BrokenProcessPool("killed")))
def test_a_pool_that_fails_leaves_the_combinations_to_this_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    def failing(workers: int, **kwargs: object) -> object:
        raise error

    monkeypatch.setattr(sharing, "ProcessPoolExecutor", failing)
    monkeypatch.setattr(sharing, "pool_size", lambda jobs, workers=None: 2)
    secrets, jobs = _jobs(8, seed=1)
    with caplog.at_level("WARNING", logger=sharing.__name__):
        assert combine_seeds(jobs, workers=2) == secrets
    assert "in this process" in caplog.text


def test_the_pool_size_is_bounded_by_cores_and_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharing.sys, "platform", "linux")
    assert pool_size(200, 2) == 2
    assert pool_size(200, 64) == 200 // 16
    assert pool_size(31, 2) == 1
    assert pool_size(200, 1) == 1
    monkeypatch.setattr(sharing.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert pool_size(200) == 3
    monkeypatch.setattr(sharing.sys, "platform", "win32")
    assert pool_size(200, 8) == 1


@linux_only
def test_a_secagg_plus_round_unmasks_the_same_sum_with_a_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spy = _Spy(sharing.ProcessPoolExecutor)
    monkeypatch.setattr(sharing, "ProcessPoolExecutor", spy)
    monkeypatch.setattr(sharing.os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(sharing, "_PER_WORKER", 1)  # by default, its 36 secrets would take 8
    ids = tuple(f"p{i:02d}" for i in range(36))
    ring = plan_ring(n_inputs=len(ids), bound=1.0, step=1e-4, dimension=5)
    setup = RoundSetup("fed", 3, ids, 19, ring, degree=4)
    rng = np.random.default_rng(7)
    values = {p: rng.uniform(-1, 1, ring.dimension) for p in ids}
    dropped = ("p03", "p20")
    result = run_local_round(
        setup,
        {p: encode(v, ring) for p, v in values.items()},
        drop_after=dict.fromkeys(dropped, "share_keys"),
        workers=2,
    ).result
    assert spy.workers == [2]  # as the server was told (34 self-mask seeds, 2 mask-key seeds)
    assert result.recovered == dropped
    plain = sum(values[p] for p in ids if p not in dropped)
    assert np.max(np.abs(result.values - plain)) <= len(ids) * ring.step / 2 + 1e-12


@linux_only
def test_a_federation_round_unmasks_with_a_pool(
    monkeypatch: pytest.MonkeyPatch, capture_sum
) -> None:
    # The server's process runs the federation; its forked workers only combine shares.
    monkeypatch.setattr(sharing, "_PER_WORKER", 1)
    monkeypatch.setattr(sharing.os, "sched_getaffinity", lambda pid: {0, 1})
    spy = _Spy(sharing.ProcessPoolExecutor)
    monkeypatch.setattr(sharing, "ProcessPoolExecutor", spy)
    fed = _federation(n_clients=4)
    driven = _Round(fed, FederationServer(fed))
    inputs = driven.upload([f"c{i}" for i in range(4)])
    report = driven.run(drop_after={"c2": 2})  # c2 drops after sharing keys
    assert report is not None and report.published
    assert report.n_contributors == 3 and report.n_recovered == 1
    assert spy.workers == [2]  # 3 self-mask seeds and 1 mask-key seed
    plain = sum(v for c, v in inputs.items() if c != "c2")
    step = fed.secure_aggregation.step
    assert np.max(np.abs(capture_sum[0] - plain)) <= 3 * step / 2 + 1e-9
    assert fed.latest_broadcast().round == 0


class _Recording(sharing.ProcessPoolExecutor):
    """The real executor, recording every combination submitted (and when)."""

    submitted: list[list[tuple[int, bytes]]] = []

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        _Recording.submitted.append(args[0])
        return super().submit(fn, *args, **kwargs)


@linux_only
def test_combinations_start_as_the_shares_arrive(monkeypatch: pytest.MonkeyPatch) -> None:
    # In a live round the server rebuilds a secret as soon as share_threshold of its shares are
    # in, in the workers, while it waits for the other answers: not all at the end.
    monkeypatch.setattr(sharing, "ProcessPoolExecutor", _Recording)
    monkeypatch.setattr(_Recording, "submitted", [])
    monkeypatch.setattr(sharing, "_PER_WORKER", 1)
    ids = tuple(f"q{i:02d}" for i in range(12))
    ring = plan_ring(n_inputs=12, bound=1.0, step=1e-3, dimension=3)
    setup = RoundSetup("fed", 5, ids, 7, ring, degree=4)
    identities = Identities(ids)
    server = SecAggServer(setup, verify=identities.verify, workers=2)
    clients = {
        p: SecAggClient(setup, p, sign=identities.signer(p), verify=identities.verify) for p in ids
    }
    rng = np.random.default_rng(3)
    values = {p: rng.uniform(-1, 1, 3) for p in ids}
    for c in clients.values():
        server.receive(c.advertise())
    directory = server.key_directory()
    for c in clients.values():
        server.receive(c.share_keys(directory))
    bundles = server.share_bundles()
    for p, c in clients.items():
        server.receive(c.mask_input(bundles[p], encode(values[p], ring)))
    survivors = server.survivor_list()
    for c in clients.values():
        server.receive(c.sign_survivors(survivors))
    request = server.unmask_request()
    answered: set[str] = set()
    for p in ids[:6]:
        server.receive(clients[p].unmask(request))
        answered.add(p)
        complete = [o for o in ids if len(answered & set(setup.holders(o))) >= 3]
        assert len(_Recording.submitted) == len(complete)  # each started once, at once
    assert 0 < len(_Recording.submitted) < len(ids)
    for p in ids[6:]:
        server.receive(clients[p].unmask(request))
    assert len(_Recording.submitted) == len(ids)
    result = server.aggregate()
    assert np.max(np.abs(result.values - sum(values.values()))) <= 12 * ring.step / 2 + 1e-12


class _Lost:
    """An executor whose every worker dies."""

    def __init__(self, workers: int, **kwargs: object) -> None:
        pass

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        future: Future = Future()
        future.set_exception(sharing.BrokenProcessPool("killed"))
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


@pytest.mark.parametrize("executor", [_Lost, "cannot start"])
def test_a_combiner_whose_pool_fails_combines_here(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, executor: object
) -> None:
    def failing(workers: int, **kwargs: object) -> object:
        raise OSError("no fork")

    monkeypatch.setattr(
        sharing, "ProcessPoolExecutor", failing if executor == "cannot start" else executor
    )
    monkeypatch.setattr(sharing, "pool_size", lambda jobs, workers=None: 2)
    secrets, jobs = _jobs(6, seed=2)
    combiner = sharing.Combiner(len(jobs))
    with caplog.at_level("WARNING", logger=sharing.__name__):
        for i, job in enumerate(jobs):
            combiner.submit(i, job)
        assert combiner.results() == dict(enumerate(secrets))
    assert "Combining the Shamir shares" in caplog.text

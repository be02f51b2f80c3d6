"""A server that runs one (round, attempt) twice cannot unmask one participant's input.

The setup of a (round, attempt) is the same each time it runs (a storage rolled back and the
setup published again): the attack shows the target, in the second run, the survivor list of
the first run (naming it) with the first run's signatures, and everyone else a list without the
target. The others then reveal the shares of the target's mask-key seed; the target would have
to reveal its self-mask seed (or ``t`` shares of it) for the server to remove every mask of its
input. It never does: survivors reveal only shares, and a signature of one run does not vouch
for a list in another.
"""

from __future__ import annotations

import base64
import contextlib

import numpy as np
import pytest

from optuna_fedbo.core.secagg.client import SecAggClient
from optuna_fedbo.core.secagg.local import Identities
from optuna_fedbo.core.secagg.masks import mask_key_from_seed
from optuna_fedbo.core.secagg.masks import pairwise_mask
from optuna_fedbo.core.secagg.masks import self_mask
from optuna_fedbo.core.secagg.messages import Message
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.messages import SurvivorList
from optuna_fedbo.core.secagg.messages import UnmaskRequest
from optuna_fedbo.core.secagg.messages import UnmaskResponse
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.ring import ring_sub
from optuna_fedbo.core.secagg.server import SecAggServer
from optuna_fedbo.core.secagg.setup import RoundSetup
from optuna_fedbo.core.secagg.sharing import combine_seeds
from optuna_fedbo.core.secagg.sharing import SEED_BYTES

IDS = tuple(f"q{i:02d}" for i in range(16))
RING = plan_ring(n_inputs=len(IDS), bound=1.0, step=1e-4, dimension=4)
TARGET = "q00"
SECRET = np.array([0.123, -0.456, 0.789, -0.321])
IDENTITIES = Identities(IDS)


def _setup(degree: int | None) -> RoundSetup:
    return RoundSetup("fed:cfg:0", 2, IDS, 9, RING, degree=degree)


def _run(setup: RoundSetup):
    """One run of the setup up to the masked inputs (fresh clients: fresh keys and seeds)."""
    server = SecAggServer(setup, verify=IDENTITIES.verify)
    clients = {
        p: SecAggClient(setup, p, sign=IDENTITIES.signer(p), verify=IDENTITIES.verify) for p in IDS
    }
    for client in clients.values():
        server.receive(client.advertise())
    directory = server.key_directory()
    for client in clients.values():
        server.receive(client.share_keys(directory))
    bundles = server.share_bundles()
    masked = {
        p: clients[p].mask_input(bundles[p], encode(SECRET if p == TARGET else np.zeros(4), RING))
        for p in IDS
    }
    return server, clients, bundles, masked, directory


def _survivors(setup: RoundSetup, listed: tuple[str, ...]) -> SurvivorList:
    return SurvivorList(**Message.base_of(setup), survivors=listed)


def _answers(response: UnmaskResponse) -> set[bytes]:
    return {*response.self_mask_shares.values(), *response.mask_key_shares.values()}


def _seeds_in(response: UnmaskResponse | None) -> list[bytes]:
    """Every seed-sized value a response carries outside its share maps."""
    if response is None:
        return []
    found = []
    for name, value in response.to_dict().items():
        if name in ("self_mask_shares", "mask_key_shares") or not isinstance(value, str):
            continue
        with contextlib.suppress(ValueError):
            raw = base64.b64decode(value, validate=True)
            if len(raw) == SEED_BYTES:
                found.append(raw)
    return found


@pytest.mark.parametrize("degree", [None, 8], ids=["complete", "secagg+"])
def test_a_replayed_attempt_never_gives_the_server_one_participants_input(degree) -> None:
    setup = _setup(degree)
    # Run 1: everyone signs L1 (all of them); the server keeps the signatures.
    _, first, _, _, _ = _run(setup)
    l1 = IDS
    signatures1 = {p: first[p].sign_survivors(_survivors(setup, l1)).signature for p in IDS}
    # Run 2 of the same setup: the target is shown L1, everyone else L2 = L1 without it.
    _, clients, bundles, masked, directory = _run(setup)
    l2 = tuple(p for p in IDS if p != TARGET)
    clients[TARGET].sign_survivors(_survivors(setup, l1))
    signatures2 = {p: clients[p].sign_survivors(_survivors(setup, l2)).signature for p in l2}
    replayed = UnmaskRequest(
        **Message.base_of(setup), survivors=l1, dropped=(), signatures=signatures1
    )
    try:
        answered: UnmaskResponse | None = clients[TARGET].unmask(replayed)
    except MessageRejected:
        answered = None  # run 1's signatures vouch for nothing in run 2
    request = UnmaskRequest(
        **Message.base_of(setup), survivors=l2, dropped=(TARGET,), signatures=signatures2
    )
    responses = {p: clients[p].unmask(request) for p in l2}
    # The server holds t shares of the target's mask-key seed ...
    key_shares = {
        setup.share_index(TARGET, p): r.mask_key_shares[TARGET]
        for p, r in responses.items()
        if TARGET in r.mask_key_shares
    }
    assert len(key_shares) >= setup.share_threshold
    (mask_seed,) = combine_seeds([dict(sorted(key_shares.items())[: setup.share_threshold])])
    key = mask_key_from_seed(mask_seed, setup, TARGET)
    adverts = {a.sender: a for a in directory.adverts}
    unmasked = masked[TARGET].masked
    for v in bundles[TARGET].sealed:
        unmasked = ring_sub(
            unmasked, pairwise_mask(key, adverts[v].mask_key, setup, TARGET, v), RING
        )
    # ... and nothing that gives its self-mask seed: fewer than t shares of it, and no seed.
    self_shares = {
        setup.share_index(TARGET, p): r.self_mask_shares[TARGET]
        for p, r in [*responses.items(), (TARGET, answered)]
        if r is not None and TARGET in r.self_mask_shares
    }
    assert len(self_shares) < setup.share_threshold
    for seed in _seeds_in(answered):
        guess = decode(ring_sub(unmasked, self_mask(seed, setup, TARGET), RING), RING)
        assert not np.allclose(guess, SECRET, atol=1e-3), "the target's input was recovered"


def test_a_survivor_answers_with_shares_only_never_its_own_self_mask_seed() -> None:
    """The self-mask seed of a survivor is rebuilt by the server from ``t`` holders' shares;
    a survivor that revealed its own seed would hand it over in a replay (above) whenever it is
    shown a list naming it, while the others reveal its mask-key seed."""
    setup = _setup(None)
    server, clients, _, masked, _ = _run(setup)
    for message in masked.values():
        server.receive(message)
    survivors = server.survivor_list()
    for client in clients.values():
        server.receive(client.sign_survivors(survivors))
    request = server.unmask_request()
    for p, client in clients.items():
        response = client.unmask(request)
        record = response.to_dict()
        assert set(record) == {
            "kind", "federation", "round", "setup", "sender", "self_mask_shares",
            "mask_key_shares",
        }  # fmt: skip
        assert client._self_seed not in _answers(response)
        assert set(response.self_mask_shares) == {o for o in IDS if p in setup.holders(o)}
        server.receive(response)
    result = server.aggregate()
    assert np.allclose(result.values, SECRET, atol=1e-3)


def test_survivor_signatures_of_another_run_of_the_setup_are_refused() -> None:
    setup = _setup(8)
    _, first, _, _, _ = _run(setup)
    old = {p: first[p].sign_survivors(_survivors(setup, IDS)) for p in IDS}
    server, clients, _, masked, _ = _run(setup)
    for message in masked.values():
        server.receive(message)
    survivors = server.survivor_list()
    with pytest.raises(MessageRejected, match="does not verify"):
        server.receive(old[TARGET])  # the server refuses it as well: it names run 1's keys
    for client in clients.values():
        server.receive(client.sign_survivors(survivors))
    request = server.unmask_request()
    mixed = {**request.signatures, **{p: old[p].signature for p in IDS}}
    with pytest.raises(MessageRejected, match="valid survivor signatures"):
        clients["q01"].unmask(
            UnmaskRequest(**Message.base_of(setup), survivors=IDS, dropped=(), signatures=mixed)
        )

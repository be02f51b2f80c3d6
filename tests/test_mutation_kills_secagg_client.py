"""The SecAgg participant (``core/secagg/client.py``), in process: the self-mask commitment and the
survivor signature are bound to their owner; a survivor list naming someone who never advertised
keys, a bundle with too few shares and an input that is not ring elements are refused; a client
whose key directory was refused refuses what follows (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from dataclasses import replace
import hashlib

import numpy as np
import pytest

from optuna_fedbo.core.secagg.client import commitment
from optuna_fedbo.core.secagg.client import consistency_payload
from optuna_fedbo.core.secagg.client import consistency_payloads
from optuna_fedbo.core.secagg.client import SecAggClient
from optuna_fedbo.core.secagg.local import Identities
from optuna_fedbo.core.secagg.local import run_local_round
from optuna_fedbo.core.secagg.messages import ConsistencySignature
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.server import SecAggServer
from optuna_fedbo.core.secagg.setup import RoundSetup

IDS = tuple(f"p{i}" for i in range(8))
RING = plan_ring(n_inputs=len(IDS), bound=1.0, step=1e-4, dimension=6)
SETUP = RoundSetup("fed", 1, IDS, 5, RING)


def _to_bundles(absent: tuple[str, ...] = ()) -> tuple[SecAggServer, dict, dict]:
    ids = Identities(IDS)
    server = SecAggServer(SETUP, verify=ids.verify)
    clients = {p: SecAggClient(SETUP, p, sign=ids.signer(p), verify=ids.verify) for p in IDS}
    present = [p for p in IDS if p not in absent]
    for p in present:
        server.receive(clients[p].advertise())
    directory = server.key_directory()
    for p in present:
        server.receive(clients[p].share_keys(directory))
    return server, clients, server.share_bundles()


def test_the_commitment_binds_its_owner_and_its_purpose() -> None:
    seed = bytes(range(16))
    assert commitment(SETUP, "p0", seed) != commitment(SETUP, "p1", seed)
    label = SETUP.info("secagg self-mask commitment", owner="p0")
    assert commitment(SETUP, "p0", seed) == hashlib.sha256(label + seed).digest()


def test_a_survivor_signature_binds_its_signer() -> None:
    survivors, keys = IDS[:5], bytes(32)
    assert consistency_payload(SETUP, "p0", survivors, keys) != consistency_payload(
        SETUP, "p1", survivors, keys
    )


def test_a_survivor_list_naming_one_who_never_advertised_is_refused() -> None:
    server, clients, bundles = _to_bundles(absent=("p7",))
    live = IDS[:7]
    for p in live:
        server.receive(clients[p].mask_input(bundles[p], encode(np.zeros(6), RING)))
    survivors = server.survivor_list()
    forged = replace(survivors, survivors=(*survivors.survivors, "p7"))
    with pytest.raises(MessageRejected, match=r"names \['p7'\] who never advertised keys"):
        clients["p0"].sign_survivors(forged)


def test_a_bundle_with_too_few_shares_is_refused() -> None:
    # share_threshold = t = 5: the participant itself and 4 neighbours hold its shares; a
    # bundle with 3 would mask with too few pairwise masks.
    _, clients, bundles = _to_bundles()
    few = dict(list(bundles["p0"].sealed.items())[:3])
    with pytest.raises(MessageRejected, match="only 3 neighbours shared keys"):
        clients["p0"].mask_input(replace(bundles["p0"], sealed=few), encode(np.zeros(6), RING))


@pytest.mark.parametrize(
    "values",
    [np.zeros(6, dtype=np.float64), np.zeros(7, dtype=np.uint64)],
    ids=["float values", "wrong length"],
)
def test_an_input_that_is_not_ring_elements_is_refused(values: np.ndarray) -> None:
    _, clients, bundles = _to_bundles()
    with pytest.raises(ValueError, match="must be 6 uint64 ring elements"):
        clients["p0"].mask_input(bundles["p0"], values)


def test_a_client_whose_directory_was_refused_refuses_what_follows() -> None:
    ids = Identities(IDS)
    server = SecAggServer(SETUP, verify=ids.verify)
    clients = {p: SecAggClient(SETUP, p, sign=ids.signer(p), verify=ids.verify) for p in IDS}
    for c in clients.values():
        server.receive(c.advertise())
    directory = server.key_directory()
    forged = replace(directory, adverts=directory.adverts[1:])  # without p0's own keys
    with pytest.raises(MessageRejected, match="own keys"):
        clients["p0"].share_keys(forged)
    for p in IDS[1:]:
        server.receive(clients[p].share_keys(directory))
    # p0 never shared keys, so it has no bundle: offered one (another's, readdressed), it
    # refuses, as it knows no peer's keys.
    bundle = replace(server.share_bundles()["p1"], recipient="p0")
    with pytest.raises(MessageRejected, match="not a neighbour"):
        clients["p0"].mask_input(bundle, encode(np.zeros(6), RING))


@pytest.mark.parametrize(
    "survivors", [IDS[:5], (*IDS[:4], "\x00sender\x00")], ids=["plain", "a-marker-named-one"]
)
def test_the_survivor_payloads_encoded_once_are_the_payloads(survivors: tuple) -> None:
    keys = bytes(range(32))
    payload = consistency_payloads(SETUP, survivors, keys)
    for sender in (*survivors, 'q"uote', "back\\slash", "naïve", "\x00sender\x00"):
        assert payload(sender) == consistency_payload(SETUP, sender, survivors, keys)


def test_each_party_encodes_the_survivor_list_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Checking t survivor signatures encodes the N-name list once per party, not once per
    # signature: the N signers once each (to sign), the N participants and the server once each.
    calls = []
    real = ConsistencySignature.signed_payload

    def counted(self: ConsistencySignature) -> bytes:
        calls.append(self.sender)
        return real(self)

    monkeypatch.setattr(ConsistencySignature, "signed_payload", counted)
    ring = SETUP.ring
    result = run_local_round(SETUP, {p: encode(np.zeros(ring.dimension), ring) for p in IDS})
    assert result.result.survivors == IDS
    assert len(calls) == 2 * len(IDS) + 1

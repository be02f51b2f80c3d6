"""SecAgg / SecAgg+ rounds: the right sum despite dropouts at every step, nothing published with
fewer than t survivors, the SecAgg rule, and messages of another round or sender refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from optuna_fedbo.core.secagg.client import SecAggClient
from optuna_fedbo.core.secagg.local import DROP_POINTS
from optuna_fedbo.core.secagg.local import Identities
from optuna_fedbo.core.secagg.local import run_local_round
from optuna_fedbo.core.secagg.messages import message_from_dict
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secagg.server import RoundFailed
from optuna_fedbo.core.secagg.server import SecAggServer
from optuna_fedbo.core.secagg.setup import RoundSetup

IDS = tuple(f"p{i}" for i in range(8))
RING = plan_ring(n_inputs=len(IDS), bound=1.0, step=1e-4, dimension=6)


def _setup(round_index: int = 1, federation: str = "fed", **kwargs: object) -> RoundSetup:
    fields: dict = {"participants": IDS, "threshold": 5, "ring": RING, **kwargs}
    return RoundSetup(federation, round_index, **fields)


def _inputs(setup: RoundSetup, seed: int = 0) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    ring = setup.ring
    values = {p: rng.uniform(-1, 1, ring.dimension) for p in setup.participants}
    return values, {p: encode(v, ring) for p, v in values.items()}


def _check_sum(setup: RoundSetup, drop_after: dict[str, str], seed: int = 0) -> None:
    values, encoded = _inputs(setup, seed)
    result = run_local_round(setup, encoded, drop_after=drop_after).result
    plain = sum(values[p] for p in result.survivors)
    assert np.max(np.abs(result.values - plain)) <= len(result.survivors) * RING.step / 2 + 1e-12
    kept = [p for p in setup.participants if drop_after.get(p) not in ("start", "advertise")]
    kept = [p for p in kept if drop_after.get(p) != "share_keys"]
    assert result.survivors == tuple(p for p in kept)
    gone_after_sharing = [p for p, s in drop_after.items() if s == "share_keys"]
    assert result.recovered == tuple(sorted(gone_after_sharing))


def test_the_sum_without_dropouts() -> None:
    _check_sum(_setup(), {})


@pytest.mark.parametrize("step", ("start", *DROP_POINTS))
def test_n_minus_t_dropouts_at_each_step_still_give_the_right_sum(step: str) -> None:
    # N = 8, t = 5: three participants drop after `step`.
    _check_sum(_setup(), {"p1": step, "p4": step, "p7": step}, seed=1)


def test_dropouts_spread_over_all_steps() -> None:
    _check_sum(_setup(), {"p0": "advertise", "p3": "share_keys", "p6": "mask_input"}, seed=2)


@pytest.mark.parametrize(
    ("step", "fails_at"),
    [
        ("start", "'keys'"),
        ("advertise", "'shares'"),
        ("share_keys", "'masked'"),
        ("mask_input", "'consistency'"),
        ("sign_survivors", "'unmask'"),
    ],
)
def test_fewer_than_t_survivors_publish_nothing(step: str, fails_at: str) -> None:
    setup = _setup()
    _, encoded = _inputs(setup)
    drop = dict.fromkeys(("p1", "p2", "p4", "p7"), step)  # 4 of 8 left, t = 5
    with pytest.raises(RoundFailed, match="nothing is published") as failure:
        run_local_round(setup, encoded, drop_after=drop)
    assert f"at step {fails_at}: only 4 participants" in str(failure.value)
    assert "at least 5 needed" in str(failure.value)


def test_secagg_plus_graph_recovers_dropouts_from_neighbours() -> None:
    ids = tuple(f"q{i:02d}" for i in range(16))
    ring = plan_ring(n_inputs=16, bound=1.0, step=1e-4, dimension=4)
    setup = RoundSetup("fed", 2, ids, 9, ring, degree=8)
    graph = setup.graph
    assert all(len(n) == 8 for n in graph.values())
    assert all(p in graph[q] for p in ids for q in graph[p])  # symmetric
    assert setup.share_threshold == 5
    rng = np.random.default_rng(3)
    values = {p: rng.uniform(-1, 1, 4) for p in ids}
    drop = {"q03": "share_keys", "q11": "share_keys", "q15": "mask_input"}
    encoded = {p: encode(v, ring) for p, v in values.items()}
    result = run_local_round(setup, encoded, drop_after=drop).result
    plain = sum(values[p] for p in result.survivors)
    assert result.recovered == ("q03", "q11")
    assert np.max(np.abs(result.values - plain)) <= 16 * ring.step / 2


def test_masked_inputs_look_uniform_in_the_ring() -> None:
    # A spy with the whole storage sees masked inputs: over many rounds (fresh keys and seeds),
    # one participant's masked zero vector is uniform in Z_2^k (chi-square on the top 4 bits).
    from scipy.special import chdtrc

    def chisquare_pvalue(counts: np.ndarray) -> float:
        expected = counts.sum() / len(counts)
        return float(chdtrc(len(counts) - 1, np.sum((counts - expected) ** 2) / expected))

    ids = ("a", "b", "c")
    ring = plan_ring(n_inputs=3, bound=1.0, step=1e-3, dimension=64)
    observed = []
    for round_index in range(40):
        setup = RoundSetup("fed", round_index, ids, 2, ring)
        encoded = {p: encode(np.full(64, 0.5 if p == "a" else 0.0), ring) for p in ids}
        identities = Identities(ids)
        server = SecAggServer(setup, verify=identities.verify)
        clients = {
            p: SecAggClient(setup, p, sign=identities.signer(p), verify=identities.verify)
            for p in ids
        }
        for c in clients.values():
            server.receive(c.advertise())
        directory = server.key_directory()
        for c in clients.values():
            server.receive(c.share_keys(directory))
        bundles = server.share_bundles()
        observed.append(clients["a"].mask_input(bundles["a"], encoded["a"]).masked)
    top = np.concatenate(observed) >> np.uint64(ring.bits - 4)
    counts = np.bincount(top.astype(np.int64), minlength=16)
    assert chisquare_pvalue(counts) > 1e-6
    # The same test has the power to see an unmasked input (the encoded 0.5 is one value).
    raw = np.tile(encoded["a"], 40) >> np.uint64(ring.bits - 4)
    assert chisquare_pvalue(np.bincount(raw.astype(np.int64), minlength=16)) < 1e-6


class _Round:
    """A round driven by hand up to the unmask request."""

    def __init__(self, setup: RoundSetup, drop: tuple[str, ...] = ()) -> None:
        self.setup = setup
        self.ids = Identities(setup.participants)
        self.server = SecAggServer(setup, verify=self.ids.verify)
        self.clients = {
            p: SecAggClient(setup, p, sign=self.ids.signer(p), verify=self.ids.verify)
            for p in setup.participants
        }
        _, encoded = _inputs(setup)
        for c in self.clients.values():
            self.server.receive(c.advertise())
        self.directory = self.server.key_directory()
        for c in self.clients.values():
            self.server.receive(c.share_keys(self.directory))
        self.bundles = self.server.share_bundles()
        self.live = [p for p in setup.participants if p not in drop]
        for p in self.live:
            self.server.receive(self.clients[p].mask_input(self.bundles[p], encoded[p]))
        survivors = self.server.survivor_list()
        for p in self.live:
            self.server.receive(self.clients[p].sign_survivors(survivors))
        self.request = self.server.unmask_request()


def test_a_server_asking_for_both_shares_of_a_peer_is_refused() -> None:
    state = _Round(_setup(), drop=("p2",))
    assert state.request.dropped == ("p2",)
    # Claim that live p3 dropped as well (while it is listed as a survivor): refused.
    greedy = replace(state.request, dropped=("p2", "p3"))
    with pytest.raises(MessageRejected, match=r"both shares of \['p3'\]: refused"):
        state.clients["p0"].unmask(greedy)
    # Move p3 from the survivors to the dropped: not the list the participants signed.
    moved = replace(
        state.request,
        survivors=tuple(p for p in state.request.survivors if p != "p3"),
        dropped=("p2", "p3"),
    )
    with pytest.raises(MessageRejected, match="differ from the list signed"):
        state.clients["p1"].unmask(moved)
    # An honest request is answered once: one kind of share per peer, never both.
    response = state.clients["p4"].unmask(state.request)
    assert set(response.self_mask_shares) == set(state.request.survivors)
    assert set(response.mask_key_shares) == {"p2"}
    with pytest.raises(MessageRejected, match="already answered"):
        state.clients["p4"].unmask(replace(state.request, dropped=("p2", "p3")))


def test_unmask_request_needs_t_valid_survivor_signatures() -> None:
    state = _Round(_setup())
    few = dict(list(state.request.signatures.items())[:4])
    with pytest.raises(MessageRejected, match="only 4 valid survivor signatures"):
        state.clients["p0"].unmask(replace(state.request, signatures=few))
    forged = {p: bytes(64) for p in state.request.signatures}
    with pytest.raises(MessageRejected, match="only 0 valid survivor signatures"):
        state.clients["p1"].unmask(replace(state.request, signatures=forged))


def test_messages_of_another_round_federation_or_sender_are_refused() -> None:
    ids = Identities(IDS)
    this_round = _setup(round_index=4)
    server = SecAggServer(this_round, verify=ids.verify)
    others = {
        "made for round 3, not 4": _setup(3),
        "made for another federation": _setup(4, federation="other"),
        "made for another setup of this round": _setup(4, threshold=6),
    }
    for message, other in others.items():
        advert = SecAggClient(other, "p0", sign=ids.signer("p0"), verify=ids.verify).advertise()
        with pytest.raises(MessageRejected, match=message):
            server.receive(advert)
    client = SecAggClient(this_round, "p0", sign=ids.signer("p0"), verify=ids.verify)
    advert = client.advertise()
    # Signed by another participant's key: forged.
    with pytest.raises(MessageRejected, match="not signed by it"):
        server.receive(replace(advert, signature=ids.signer("p1")(advert.signed_payload())))
    server.receive(message_from_dict(advert.to_dict()))
    with pytest.raises(MessageRejected, match="already sent"):
        server.receive(advert)  # a replay
    assert server.missing() == IDS[1:]


def test_client_refuses_a_forged_directory_and_a_moved_or_altered_share() -> None:
    setup = _setup()
    ids = Identities(IDS)
    server = SecAggServer(setup, verify=ids.verify)
    clients = {p: SecAggClient(setup, p, sign=ids.signer(p), verify=ids.verify) for p in IDS}
    for c in clients.values():
        server.receive(c.advertise())
    directory = server.key_directory()
    # The server swaps in its own mask key for p5 (a man in the middle): p5's signature fails.
    adverts = tuple(
        replace(a, mask_key=bytes(32)) if a.sender == "p5" else a for a in directory.adverts
    )
    with pytest.raises(MessageRejected, match="keys of 'p5' are not signed"):
        clients["p0"].share_keys(replace(directory, adverts=adverts))
    for p in IDS[1:]:
        server.receive(clients[p].share_keys(directory))
    bundles = server.share_bundles()
    # p1's bundle given to p2: bound to another recipient.
    with pytest.raises(MessageRejected, match="names 'p1', expected 'p2'"):
        clients["p2"].mask_input(bundles["p1"], encode(np.zeros(6), RING))
    sealed = dict(bundles["p3"].sealed)
    sealed["p4"] = sealed["p4"][:-1] + bytes([sealed["p4"][-1] ^ 1])
    with pytest.raises(MessageRejected, match="do not authenticate"):
        clients["p3"].mask_input(replace(bundles["p3"], sealed=sealed), encode(np.zeros(6), RING))


def test_server_refuses_shares_revealed_against_the_rule() -> None:
    state = _Round(_setup(), drop=("p2",))
    response = state.clients["p0"].unmask(state.request)
    # A response carrying the mask-key share of a survivor (p1) is not kept.
    leaked = replace(response, mask_key_shares={**response.mask_key_shares, "p1": bytes(16)})
    with pytest.raises(MessageRejected, match="mask-key shares it may not"):
        state.server.receive(leaked)
    state.server.receive(response)
    assert "p0" not in state.server.missing()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 4}, "not a strict majority of the 8 participants: use at least 5"),
        ({"threshold": 9}, "exceeds the 8 participants: enroll more"),
        ({"participants": ("a", "b")}, "at least 3 participants"),
        ({"participants": ("a", "a", "b", "c")}, "distinct"),
        ({"degree": 3}, "must be even"),
    ],
)
def test_bad_setups_are_refused(kwargs: dict, message: str) -> None:
    fields = {"participants": IDS, "threshold": 5, "ring": RING, **kwargs}
    if "participants" in kwargs and "threshold" not in kwargs:
        fields["threshold"] = len(set(kwargs["participants"])) // 2 + 1
    with pytest.raises(ValueError, match=message):
        RoundSetup("fed", 1, **fields)


@pytest.mark.parametrize(
    ("kind", "owner", "message"),
    [
        ("self_mask_shares", "p1", "self-mask shares of 'p1' do not match its seed"),
        ("mask_key_shares", "p2", "mask-key shares of 'p2' do not match its key"),
    ],
)
def test_a_wrong_share_fails_the_round_instead_of_a_wrong_sum(
    kind: str, owner: str, message: str
) -> None:
    state = _Round(_setup(), drop=("p2",))
    for p in state.live:
        response = state.clients[p].unmask(state.request)
        if p == "p0":  # holder of index 1 of every owner: its share is always used
            response = replace(response, **{kind: {**getattr(response, kind), owner: bytes(16)}})
        state.server.receive(response)
    with pytest.raises(RoundFailed, match=f"{message}; nothing is published"):
        state.server.aggregate()
    assert state.server.step == "failed"


def _sparse_round() -> tuple[tuple[str, ...], RingSpec, RoundSetup, SecAggServer, dict]:
    """Twelve participants on a SecAgg+ graph of degree 4, their keys advertised."""
    ids = tuple(f"q{i:02d}" for i in range(12))
    ring = plan_ring(n_inputs=12, bound=1.0, step=1e-3, dimension=3)
    setup = RoundSetup("fed", 5, ids, 7, ring, degree=4)
    identities = Identities(ids)
    server = SecAggServer(setup, verify=identities.verify)
    clients = {
        p: SecAggClient(setup, p, sign=identities.signer(p), verify=identities.verify) for p in ids
    }
    for c in clients.values():
        server.receive(c.advertise())
    return ids, ring, setup, server, clients


def test_secagg_plus_shares_only_between_neighbours() -> None:
    ids, ring, setup, server, clients = _sparse_round()
    directory = server.key_directory()
    shares = {p: c.share_keys(directory) for p, c in clients.items()}
    owner = "q00"
    stranger = next(p for p in ids if p != owner and p not in setup.neighbours(owner))
    assert set(shares[owner].sealed) == set(setup.neighbours(owner))
    # The server refuses shares sealed for a non-neighbour ...
    extra = {**shares[owner].sealed, stranger: next(iter(shares[owner].sealed.values()))}
    with pytest.raises(MessageRejected, match="sealed shares for the wrong holders"):
        server.receive(replace(shares[owner], sealed=extra))
    for message in shares.values():
        server.receive(message)
    bundles = server.share_bundles()
    # ... and a participant refuses a bundle carrying a non-neighbour's shares.
    holder = setup.neighbours(owner)[0]
    forged = {**bundles[stranger].sealed, owner: bundles[holder].sealed[owner]}
    with pytest.raises(MessageRejected, match="shares of 'q00', not a neighbour"):
        clients[stranger].mask_input(
            replace(bundles[stranger], sealed=forged), encode(np.zeros(3), ring)
        )


def test_malformed_or_mislabelled_records_are_refused() -> None:
    state = _Round(_setup(), drop=("p2",))
    record = state.request.to_dict()
    assert message_from_dict(record) == state.request
    with pytest.raises(MessageRejected, match="unknown secure-aggregation message kind"):
        message_from_dict({**record, "kind": "secagg-other"})
    with pytest.raises(MessageRejected, match="must have exactly"):
        message_from_dict({**record, "extra": 1})
    with pytest.raises(MessageRejected, match="not a list of participant ids"):
        message_from_dict({**record, "survivors": "p0"})
    with pytest.raises(MessageRejected, match="not valid base64"):
        message_from_dict({**record, "signatures": {"p0": "***"}})


@pytest.mark.parametrize("degree", [None, 4])
def test_held_by_is_the_inverse_of_holders(degree: int | None) -> None:
    ids = tuple(f"q{i:02d}" for i in range(12))
    setup = RoundSetup(
        "fed", 5, ids, 7, plan_ring(n_inputs=12, bound=1.0, step=1e-3, dimension=3), degree=degree
    )
    for owner in ids:
        for holder in ids:
            assert (holder in setup.holders(owner)) == (owner in setup.held_by(holder))
    assert setup.held_by("nobody") == frozenset()


def test_secagg_plus_server_refuses_a_share_revealed_by_a_non_holder() -> None:
    ids, ring, setup, server, clients = _sparse_round()
    directory = server.key_directory()
    for c in clients.values():
        server.receive(c.share_keys(directory))
    bundles = server.share_bundles()
    for p, c in clients.items():
        server.receive(c.mask_input(bundles[p], encode(np.zeros(3), ring)))
    survivors = server.survivor_list()
    for c in clients.values():
        server.receive(c.sign_survivors(survivors))
    request = server.unmask_request()
    response = clients["q00"].unmask(request)
    stranger = next(p for p in ids if p != "q00" and p not in setup.neighbours("q00"))
    assert set(response.self_mask_shares) == set(setup.held_by("q00"))
    leaked = replace(response, self_mask_shares={**response.self_mask_shares, stranger: bytes(16)})
    with pytest.raises(MessageRejected, match="self-mask shares it may not"):
        server.receive(leaked)
    server.receive(response)
    for p, c in clients.items():
        if p != "q00":
            server.receive(c.unmask(request))
    assert np.array_equal(server.aggregate().elements, np.zeros(3, dtype=np.uint64))

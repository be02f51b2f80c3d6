"""The SecAgg server (``core/secagg/server.py``), in process: a message of another step, an input
outside the ring or a self-mask share of a dropped peer is refused; a failed or finished round
expects nothing more; a failure names the step, what was short and who is missing (written to
kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from optuna_fedbo.core.secagg.client import SecAggClient
from optuna_fedbo.core.secagg.local import Identities
from optuna_fedbo.core.secagg.local import run_local_round
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import encode
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.server import RoundFailed
from optuna_fedbo.core.secagg.server import SecAggServer
from optuna_fedbo.core.secagg.setup import RoundSetup

IDS = tuple(f"p{i}" for i in range(8))
RING = plan_ring(n_inputs=len(IDS), bound=1.0, step=1e-4, dimension=6)


def _setup() -> RoundSetup:
    return RoundSetup("fed", 1, IDS, 5, RING)


def _encoded(setup: RoundSetup) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {p: encode(rng.uniform(-1, 1, RING.dimension), RING) for p in setup.participants}


class _Round:
    """A round driven by hand, step by step (``drop``: who never sends its masked input)."""

    def __init__(self, setup: RoundSetup, drop: tuple[str, ...] = ()) -> None:
        self.setup = setup
        ids = Identities(setup.participants)
        self.server = SecAggServer(setup, verify=ids.verify)
        self.clients = {
            p: SecAggClient(setup, p, sign=ids.signer(p), verify=ids.verify)
            for p in setup.participants
        }
        self.encoded = _encoded(setup)
        self.live = [p for p in setup.participants if p not in drop]

    def to_masked(self) -> dict:
        for c in self.clients.values():
            self.server.receive(c.advertise())
        directory = self.server.key_directory()
        for c in self.clients.values():
            self.server.receive(c.share_keys(directory))
        return self.server.share_bundles()

    def to_unmask(self) -> None:
        bundles = self.to_masked()
        for p in self.live:
            self.server.receive(self.clients[p].mask_input(bundles[p], self.encoded[p]))
        survivors = self.server.survivor_list()
        for p in self.live:
            self.server.receive(self.clients[p].sign_survivors(survivors))
        self.request = self.server.unmask_request()


def test_a_message_of_another_step_is_refused_and_a_finished_round_expects_nothing() -> None:
    state = _Round(_setup())
    bundles = state.to_masked()
    masked = state.clients["p0"].mask_input(bundles["p0"], state.encoded["p0"])
    state.server.receive(masked)
    # An advertisement sent during the masked-input step: refused, not kept.
    other = SecAggClient(state.setup, "p0", sign=lambda b: b"", verify=lambda *a: True)
    with pytest.raises(MessageRejected, match="is not a message of step 'masked'"):
        state.server.receive(other.advertise())
    for p in IDS[1:]:
        state.server.receive(state.clients[p].mask_input(bundles[p], state.encoded[p]))
    survivors = state.server.survivor_list()
    for p in IDS:
        state.server.receive(state.clients[p].sign_survivors(survivors))
    request = state.server.unmask_request()
    responses = {p: state.clients[p].unmask(request) for p in IDS}
    for response in responses.values():
        state.server.receive(response)
    result = state.server.aggregate()
    assert state.server.step == "done"
    assert state.server.expected() == () and state.server.missing() == ()
    # The result's ring elements are the sum the decoded values come from.
    assert result.elements.shape == (RING.dimension,)
    np.testing.assert_array_equal(decode(result.elements, RING), result.values)
    plain = sum(decode(state.encoded[p], RING) for p in IDS)
    assert np.max(np.abs(result.values - plain)) <= 1e-9
    # A finished round takes no message (a replayed response is refused, not a KeyError).
    with pytest.raises(MessageRejected, match="is not a message of step 'done'"):
        state.server.receive(responses["p0"])


def test_a_failed_round_expects_nothing_more() -> None:
    state = _Round(_setup())
    for c in list(state.clients.values())[:4]:
        state.server.receive(c.advertise())
    with pytest.raises(RoundFailed):
        state.server.key_directory()
    assert state.server.step == "failed"
    assert state.server.expected() == () and state.server.missing() == ()


@pytest.mark.parametrize(
    ("what", "value"),
    [("a wrong shape", None), ("an element above the ring", int(RING.mask) + 1)],
)
def test_a_masked_input_outside_the_ring_is_refused(what: str, value: int | None) -> None:
    state = _Round(_setup())
    bundles = state.to_masked()
    masked = state.clients["p0"].mask_input(bundles["p0"], state.encoded["p0"])
    if value is None:
        bad = np.zeros(RING.dimension + 1, dtype=np.uint64)
    else:
        bad = masked.masked.copy()
        bad[2] = value
    with pytest.raises(MessageRejected, match="masked input is not in the ring"):
        state.server.receive(replace(masked, masked=bad))
    assert "p0" in state.server.missing(), what


def test_the_largest_ring_element_is_a_valid_masked_input() -> None:
    state = _Round(_setup())
    bundles = state.to_masked()
    masked = state.clients["p0"].mask_input(bundles["p0"], state.encoded["p0"])
    top = masked.masked.copy()
    top[0] = RING.mask
    state.server.receive(replace(masked, masked=top))
    assert "p0" not in state.server.missing()


def test_a_self_mask_share_of_a_dropped_peer_is_refused() -> None:
    # With both shares of dropped p2 the server would remove p2's self mask from its masked
    # input had it arrived late: the SecAgg rule, enforced by the server as well.
    state = _Round(_setup(), drop=("p2",))
    state.to_unmask()
    response = state.clients["p0"].unmask(state.request)
    assert "p2" in response.mask_key_shares
    leaked = replace(response, self_mask_shares={**response.self_mask_shares, "p2": bytes(16)})
    with pytest.raises(MessageRejected, match="revealed self-mask shares it may not"):
        state.server.receive(leaked)
    assert "p0" in state.server.missing()


@pytest.mark.parametrize(
    ("step", "what"),
    [
        ("start", "at step 'keys': only 4 participants advertised keys"),
        ("advertise", "at step 'shares': only 4 participants shared keys"),
        ("share_keys", "at step 'masked': only 4 participants sent masked inputs"),
        ("mask_input", "at step 'consistency': only 4 participants signed the survivor list"),
        ("sign_survivors", "at step 'unmask': only 4 participants revealed shares"),
    ],
)
def test_a_failure_names_the_step_what_was_short_and_who_is_missing(step: str, what: str) -> None:
    setup = _setup()
    drop = dict.fromkeys(("p1", "p2", "p4", "p7"), step)  # 4 of 8 left, t = 5
    with pytest.raises(RoundFailed) as failure:
        run_local_round(setup, _encoded(setup), drop_after=drop)
    assert f"{what} (at least 5 needed); nothing is published. Missing: p1, p2, p4, p7." in str(
        failure.value
    )


def test_a_participant_that_lost_too_many_neighbours_fails_the_round_for_good() -> None:
    ids = tuple(f"q{i:02d}" for i in range(12))
    ring = plan_ring(n_inputs=12, bound=1.0, step=1e-3, dimension=3)
    setup = RoundSetup("fed", 5, ids, 7, ring, degree=4)
    assert setup.share_threshold == 3
    gone = setup.neighbours("q00")[:3]  # q00 keeps itself and one neighbour: 2 holders < 3
    state = _Round(setup, drop=gone)
    state.encoded = {p: encode(np.zeros(3), ring) for p in ids}
    bundles = state.to_masked()
    for p in state.live:
        state.server.receive(state.clients[p].mask_input(bundles[p], state.encoded[p]))
    with pytest.raises(RoundFailed) as failure:
        state.server.survivor_list()
    assert "'q00' lost too many neighbours (only 2 holders" in str(failure.value)
    assert str(failure.value).endswith("nothing is published.")
    assert state.server.step == "failed"
    with pytest.raises(RoundFailed, match="lost too many neighbours"):
        state.server.survivor_list()

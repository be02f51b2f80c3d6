"""The server's side of SecAgg / SecAgg+: collect each step's messages, close it, unmask the sum.

For every step the server :meth:`~SecAggServer.receive` s the participants' messages (a forged,
duplicate, out-of-step or foreign one raises :class:`MessageRejected` and is not kept) and then
closes the step with the broadcast of the next one. Each close needs at least ``t`` participants
(``setup.threshold``); with fewer the round fails with :class:`RoundFailed`, which names the step
and who is missing, and nothing is published. :meth:`~SecAggServer.aggregate` rebuilds the
self-mask seeds of the survivors and the mask-key seeds of those that dropped after sharing keys
(from ``share_threshold`` shares each, checked against the commitment and the advertised public
key), removes every mask and returns the sum of the survivors' inputs and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from optuna_fedbo.core.secagg.client import commitment
from optuna_fedbo.core.secagg.client import consistency_payloads
from optuna_fedbo.core.secagg.client import Verifier
from optuna_fedbo.core.secagg.masks import add_all
from optuna_fedbo.core.secagg.masks import mask_key_from_seed
from optuna_fedbo.core.secagg.masks import pairwise_mask
from optuna_fedbo.core.secagg.masks import public_bytes
from optuna_fedbo.core.secagg.masks import self_mask
from optuna_fedbo.core.secagg.messages import AdvertiseKeys
from optuna_fedbo.core.secagg.messages import ConsistencySignature
from optuna_fedbo.core.secagg.messages import KeyDirectory
from optuna_fedbo.core.secagg.messages import MaskedInput
from optuna_fedbo.core.secagg.messages import Message
from optuna_fedbo.core.secagg.messages import MessageRejected
from optuna_fedbo.core.secagg.messages import ShareBundle
from optuna_fedbo.core.secagg.messages import ShareKeys
from optuna_fedbo.core.secagg.messages import SurvivorList
from optuna_fedbo.core.secagg.messages import UnmaskRequest
from optuna_fedbo.core.secagg.messages import UnmaskResponse
from optuna_fedbo.core.secagg.ring import decode
from optuna_fedbo.core.secagg.ring import ring_sub
from optuna_fedbo.core.secagg.setup import RoundSetup
from optuna_fedbo.core.secagg.sharing import Combiner
from optuna_fedbo.core.secagg.sharing import SEED_BYTES

STEPS = ("keys", "shares", "masked", "consistency", "unmask", "done")
_EXPECTS: dict[str, type[Message]] = {
    "keys": AdvertiseKeys,
    "shares": ShareKeys,
    "masked": MaskedInput,
    "consistency": ConsistencySignature,
    "unmask": UnmaskResponse,
}


class RoundFailed(RuntimeError):
    """Fewer than ``t`` participants (or share holders) survived a step: nothing is published."""


@dataclass(frozen=True)
class AggregateResult:
    """The unmasked sum of one round.

    Attributes:
        elements: The sum as ring elements.
        values: The decoded sum (centred integers times the fixed-point step).
        survivors: Whose inputs are in the sum (``U3``).
        recovered: Participants that dropped after sharing keys whose masks were removed.
    """

    elements: np.ndarray
    values: np.ndarray
    survivors: tuple[str, ...]
    recovered: tuple[str, ...]


class SecAggServer:
    """The server's state for one round.

    Args:
        setup: The round's public setup.
        verify: Verifies a participant's signature against its enrolled key.
        workers: Processes that rebuild the seeds at unmasking (default: the usable cores;
            see :func:`~optuna_fedbo.core.secagg.sharing.combine_seeds`).
    """

    def __init__(self, setup: RoundSetup, *, verify: Verifier, workers: int | None = None) -> None:
        self.setup = setup
        self._verify = verify
        self._step = 0
        self._failed: str | None = None
        self._received: dict[str, dict[str, Message]] = {step: {} for step in _EXPECTS}
        self._dropped: tuple[str, ...] = ()
        self._keys = b""  # the digest of this run's key directory
        self._workers = workers
        #: The shares revealed so far of each owner's secret (``{index: share}``), the first
        #: ``share_threshold`` to arrive; a full set is combined at once (see :meth:`_gather`).
        self._revealed: dict[str, dict[int, bytes]] = {}
        self._combiner: Combiner | None = None
        #: The survivor signatures' payloads, the survivor list encoded once.
        self._payloads: Callable[[str], bytes] | None = None

    @property
    def step(self) -> str:
        """The step being collected (``"done"`` once aggregated, ``"failed"`` after failing)."""
        return "failed" if self._failed else STEPS[self._step]

    def _senders(self, step: str) -> tuple[str, ...]:
        return tuple(sorted(self._received[step]))

    def expected(self) -> tuple[str, ...]:
        """Who should send a message in the current step."""
        if self._failed or STEPS[self._step] == "done":
            return ()
        previous = {
            "keys": self.setup.participants,
            "shares": self._senders("keys"),
            "masked": self._senders("shares"),
            "consistency": self._senders("masked"),
            "unmask": self._senders("masked"),
        }
        return previous[STEPS[self._step]]

    def missing(self) -> tuple[str, ...]:
        """Who has not yet sent its message for the current step (for ``status``)."""
        received = self._received.get(self.step, {})
        return tuple(p for p in self.expected() if p not in received)

    # ------------------------------------------------------------------------- receiving
    def receive(self, message: Message) -> None:
        """Keep one participant message of the current step.

        Raises:
            MessageRejected: If it is of another step, bound to another round or setup, from a
                participant not expected at this step, a second one from the same sender,
                or fails its step's checks (signature, holders, size, lists).
        """
        if self._failed:
            raise RoundFailed(self._failed)
        step = STEPS[self._step]
        if step == "done" or not isinstance(message, _EXPECTS[step]):
            raise MessageRejected(f"{message.kind} is not a message of step {step!r}")
        message.check_bound(self.setup)
        sender: str = message.sender  # type: ignore[attr-defined]
        if sender not in self.expected():
            raise MessageRejected(f"{sender!r} is not expected at step {step!r}")
        if sender in self._received[step]:
            raise MessageRejected(f"{sender!r} already sent its {message.kind} message")
        getattr(self, f"_check_{step}")(message)
        self._received[step][sender] = message
        if step == "unmask":
            self._gather(message)  # type: ignore[arg-type]

    def _check_keys(self, message: AdvertiseKeys) -> None:
        if not self._verify(message.sender, message.signed_payload(), message.signature):
            raise MessageRejected(f"the keys of {message.sender!r} are not signed by it")

    def _check_shares(self, message: ShareKeys) -> None:
        live = set(self._senders("keys"))
        wanted = {h for h in self.setup.holders(message.sender) if h in live} - {message.sender}
        if set(message.sealed) != wanted:
            raise MessageRejected(f"{message.sender!r} sealed shares for the wrong holders")
        if len(message.commitment) != 32:
            raise MessageRejected(f"{message.sender!r}'s commitment is malformed")

    def _check_masked(self, message: MaskedInput) -> None:
        ring = self.setup.ring
        if message.masked.shape != (ring.dimension,) or np.any(message.masked > ring.mask):
            raise MessageRejected(f"{message.sender!r}'s masked input is not in the ring")

    def _check_consistency(self, message: ConsistencySignature) -> None:
        survivors = self._senders("masked")
        if message.survivors != survivors:
            raise MessageRejected(f"{message.sender!r} signed another survivor list")
        if self._payloads is None:
            self._payloads = consistency_payloads(self.setup, survivors, self._keys)
        if not self._verify(message.sender, self._payloads(message.sender), message.signature):
            raise MessageRejected(f"{message.sender!r}'s survivor signature does not verify")

    def _check_unmask(self, message: UnmaskResponse) -> None:
        held = self.setup.held_by(message.sender).intersection(self._received["shares"])
        survivors = held.intersection(self._received["masked"])
        dropped = held.intersection(self._dropped)
        if not set(message.self_mask_shares) <= survivors:
            raise MessageRejected(f"{message.sender!r} revealed self-mask shares it may not")
        if not set(message.mask_key_shares) <= dropped:
            raise MessageRejected(f"{message.sender!r} revealed mask-key shares it may not")
        shares = [*message.self_mask_shares.values(), *message.mask_key_shares.values()]
        if any(len(s) != SEED_BYTES for s in shares):
            raise MessageRejected(f"{message.sender!r} sent a malformed share")

    # ------------------------------------------------------------------------- closing
    def _close(self, step: str, needed: int, what: str) -> tuple[str, ...]:
        if self._failed:
            raise RoundFailed(self._failed)
        if STEPS[self._step] != step:
            raise RuntimeError(f"cannot close step {step!r} while at {STEPS[self._step]!r}")
        senders = self._senders(step)
        if len(senders) < needed:
            self._failed = (
                f"secure aggregation round {self.setup.round_index} failed at step {step!r}: "
                f"only {len(senders)} participants {what} (at least {needed} needed); nothing "
                f"is published. Missing: {', '.join(self.missing()) or 'none'}."
            )
            raise RoundFailed(self._failed)
        self._step += 1
        return senders

    def key_directory(self) -> KeyDirectory:
        """Close step 1 (``|U1| >= t``): the directory of advertised keys."""
        senders = self._close("keys", self.setup.threshold, "advertised keys")
        adverts = tuple(self._received["keys"][p] for p in senders)
        directory = KeyDirectory(**Message.base_of(self.setup), adverts=adverts)  # type: ignore[arg-type]
        self._keys = directory.digest()
        return directory

    def share_bundles(self) -> dict[str, ShareBundle]:
        """Close step 2 (``|U2| >= t``): each sharer's bundle of the shares sealed for it."""
        senders = self._close("shares", self.setup.threshold, "shared keys")
        shares: dict[str, ShareKeys] = self._received["shares"]  # type: ignore[assignment]
        return {
            h: ShareBundle(
                **Message.base_of(self.setup),
                recipient=h,
                sealed={o: shares[o].sealed[h] for o in senders if h in shares[o].sealed},
            )
            for h in senders
        }

    def survivor_list(self) -> SurvivorList:
        """Close step 3 (``|U3| >= t``): whose masked inputs will be summed."""
        setup = self.setup
        senders = self._close("masked", setup.threshold, "sent masked inputs")
        self._dropped = tuple(p for p in self._senders("shares") if p not in senders)
        # Every mask to remove needs share_threshold surviving holders (SecAgg+: a participant
        # whose neighbours dropped too has too few): fail before any share is revealed.
        alive = set(senders)
        for owner in (*senders, *self._dropped):
            holding = sum(h in alive for h in setup.holders(owner))
            if holding < setup.share_threshold:
                self._failed = (
                    f"secure aggregation round {setup.round_index} failed at step 'masked': "
                    f"{owner!r} lost too many neighbours (only {holding} holders of its shares "
                    f"survive, {setup.share_threshold} needed), so its masks cannot be removed; "
                    "nothing is published."
                )
                raise RoundFailed(self._failed)
        return SurvivorList(**Message.base_of(setup), survivors=senders)

    def unmask_request(self) -> UnmaskRequest:
        """Close step 4 (``t`` survivor signatures): ask for the shares."""
        self._close("consistency", self.setup.threshold, "signed the survivor list")
        signed: dict[str, ConsistencySignature] = self._received["consistency"]  # type: ignore[assignment]
        return UnmaskRequest(
            **Message.base_of(self.setup),
            survivors=self._senders("masked"),
            dropped=self._dropped,
            signatures={p: m.signature for p, m in signed.items()},
        )

    def _gather(self, message: UnmaskResponse) -> None:
        """Keep the shares of a checked response, and start rebuilding every secret whose
        ``share_threshold`` shares are now in (in worker processes, while the server goes on
        waiting for and opening the other responses). Self-mask shares are only of survivors
        and mask-key shares only of dropped participants (:meth:`_check_unmask`), so an owner
        names one secret."""
        setup = self.setup
        needed = setup.share_threshold
        if self._combiner is None:
            jobs = len(self._received["masked"]) + len(self._dropped)
            self._combiner = Combiner(jobs, workers=self._workers)
        for given in (message.self_mask_shares, message.mask_key_shares):
            for owner, share in given.items():
                found = self._revealed.setdefault(owner, {})
                if len(found) < needed:
                    found[setup.share_index(owner, message.sender)] = share
                    if len(found) == needed:
                        self._combiner.submit(owner, found)

    def aggregate(self) -> AggregateResult:
        """Close step 5: rebuild the seeds, remove the masks, return the sum.

        Each secret is rebuilt from the first ``share_threshold`` of its shares to arrive (any
        of them determine it; a wrong one fails the check against the commitment or the public
        key, and the round).

        Raises:
            RoundFailed: If fewer than ``t`` survivors answered, some participant's secret has
                fewer than ``share_threshold`` shares, or a rebuilt seed fails its check.
        """
        try:
            return self._aggregate()
        finally:
            if self._combiner is not None:
                self._combiner.close()

    def _aggregate(self) -> AggregateResult:
        setup = self.setup
        self._close("unmask", setup.threshold, "revealed shares")
        masked: dict[str, MaskedInput] = self._received["masked"]  # type: ignore[assignment]
        adverts: dict[str, AdvertiseKeys] = self._received["keys"]  # type: ignore[assignment]
        shares: dict[str, ShareKeys] = self._received["shares"]  # type: ignore[assignment]
        survivors = self._senders("masked")
        needed = setup.share_threshold
        try:
            for owner in (*survivors, *self._dropped):
                count = len(self._revealed.get(owner, ()))
                if count < needed:
                    raise RoundFailed(
                        f"only {count} shares of {owner!r} were revealed ({needed} needed)"
                    )
            assert self._combiner is not None  # made at the first response, >= t of them
            seeds = self._combiner.results()
            removed = []
            for owner in survivors:
                if commitment(setup, owner, seeds[owner]) != shares[owner].commitment:
                    raise RoundFailed(f"the self-mask shares of {owner!r} do not match its seed")
                removed.append(self_mask(seeds[owner], setup, owner))
            for owner in self._dropped:
                key = mask_key_from_seed(seeds[owner], setup, owner)
                if public_bytes(key) != adverts[owner].mask_key:
                    raise RoundFailed(f"the mask-key shares of {owner!r} do not match its key")
                for v in survivors:
                    if v in setup.neighbours(owner):
                        removed.append(pairwise_mask(key, adverts[v].mask_key, setup, v, owner))
        except RoundFailed as error:
            self._failed = (
                f"secure aggregation round {setup.round_index} failed at unmasking: {error}; "
                "nothing is published."
            )
            raise RoundFailed(self._failed) from None
        total = ring_sub(
            add_all([masked[p].masked for p in survivors], setup.ring),
            add_all(removed, setup.ring),
            setup.ring,
        )
        return AggregateResult(
            elements=total,
            values=decode(total, setup.ring),
            survivors=survivors,
            recovered=self._dropped,
        )

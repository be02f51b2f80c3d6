"""A participant's side of SecAgg (Bonawitz et al., CCS 2017) and SecAgg+ (Bell et al., CCS 2020).

The five steps, each a method that takes the server's message and returns the participant's:

1. :meth:`SecAggClient.advertise`: fresh X25519 channel key and mask key (the latter derived from
   a 16-byte seed), signed for the peers.
2. :meth:`SecAggClient.share_keys`: checks the key directory (signatures, its own keys untouched,
   enough holders), draws the self-mask seed, Shamir-shares both seeds with threshold
   ``share_threshold`` among its holders (its graph neighbours and itself), seals each holder's
   pair of shares to it.
3. :meth:`SecAggClient.mask_input`: opens the shares it holds and uploads
   ``x + PRG(b_u) + sum_v +-PRG(s_uv)`` over the neighbours that shared keys.
4. :meth:`SecAggClient.sign_survivors`: signs the survivor list (the consistency check of the
   actively secure SecAgg: every honest participant answers step 5 only for a list that ``t``
   survivors signed, so the server cannot tell one participant that ``v`` survived and another
   that ``v`` dropped). The signature covers the digest of the run's key directory as well: a
   (round, attempt) run again (a replayed setup) has fresh keys, so the signatures of the
   first run vouch for nothing in the second.
5. :meth:`SecAggClient.unmask`: the SecAgg rule: for each peer, the self-mask share if the peer
   survived or the mask-key share if it dropped, never both; a request naming a peer in both lists,
   a second request, or a list other than the one it signed is refused.

Every step refuses messages bound to another round, federation or setup (:class:`MessageRejected`)
and runs once, in order. The input is a vector of ring elements (see :mod:`.ring`); the
distributed DP noise, if any, is added before (:mod:`.distributed_dp`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
import hashlib
import json
import os

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
import numpy as np

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
from optuna_fedbo.core.secagg.ring import ring_add
from optuna_fedbo.core.secagg.setup import RoundSetup
from optuna_fedbo.core.secagg.sharing import open_shares
from optuna_fedbo.core.secagg.sharing import seal_shares
from optuna_fedbo.core.secagg.sharing import SEED_BYTES
from optuna_fedbo.core.secagg.sharing import split_seed

#: Signs bytes with the participant's enrolled identity key.
Signer = Callable[[bytes], bytes]
#: ``verify(participant, message, signature)`` against that participant's enrolled key.
Verifier = Callable[[str, bytes, bytes], bool]

_STEPS = ("advertise", "share_keys", "mask_input", "sign_survivors", "unmask", "done")


def commitment(setup: RoundSetup, owner: str, seed: bytes) -> bytes:
    """``SHA-256`` commitment to ``owner``'s self-mask seed (checked after reconstruction)."""
    return hashlib.sha256(setup.info("secagg self-mask commitment", owner=owner) + seed).digest()


def consistency_payload(
    setup: RoundSetup, sender: str, survivors: tuple[str, ...], keys: bytes
) -> bytes:
    """What ``sender`` signs to vouch for the survivor list of the run whose key directory has
    the digest ``keys`` (:meth:`KeyDirectory.digest`, 32 bytes): the setup alone is the same
    each time its (round, attempt) runs, and a signature of one run must not vouch for a list
    in a replay of it."""
    unsigned = ConsistencySignature(
        **Message.base_of(setup), sender=sender, survivors=tuple(survivors), signature=b""
    )
    return unsigned.signed_payload() + keys


def consistency_payloads(
    setup: RoundSetup, survivors: tuple[str, ...], keys: bytes
) -> Callable[[str], bytes]:
    """``sender -> consistency_payload(setup, sender, survivors, keys)``, the survivor list
    encoded once: the canonical JSON of the payload is cut around the sender's (escaped) name,
    so checking ``t`` signatures of a list of ``N`` names costs ``O(N + t)``, not ``O(N t)``."""
    marker = "\x00sender\x00"
    encoded = json.dumps(marker).encode()
    whole = consistency_payload(setup, marker, survivors, keys)
    if whole.count(encoded) != 1:  # a participant named so: encode each payload whole
        return lambda sender: consistency_payload(setup, sender, survivors, keys)
    head, _, tail = whole.partition(encoded)
    return lambda sender: head + json.dumps(sender).encode() + tail


class SecAggClient:
    """One participant's state for one round.

    Args:
        setup: The round's public setup.
        participant: This participant's id (one of ``setup.participants``).
        sign: Signs with this participant's enrolled identity key.
        verify: Verifies a peer's signature against its enrolled key.
    """

    def __init__(
        self, setup: RoundSetup, participant: str, *, sign: Signer, verify: Verifier
    ) -> None:
        if participant not in setup.participants:
            raise ValueError(f"{participant!r} is not a participant of this round's setup.")
        self.setup = setup
        self.participant = participant
        self._sign = sign
        self._verify = verify
        self._step = 0
        self._channel = X25519PrivateKey.generate()
        self._mask_seed = os.urandom(SEED_BYTES)
        self._mask_key = mask_key_from_seed(self._mask_seed, setup, participant)
        self._self_seed = b""
        self._adverts: dict[str, AdvertiseKeys] = {}
        self._held: dict[str, tuple[bytes, bytes]] = {}
        self._signed: tuple[str, ...] | None = None
        self._keys = b""  # the digest of the key directory of this run

    @property
    def step(self) -> str:
        """The next step this participant expects."""
        return _STEPS[self._step]

    def _enter(self, step: str) -> None:
        if _STEPS[self._step] != step:
            raise MessageRejected(
                f"{self.participant}: {step} out of order (expected {_STEPS[self._step]})"
            )
        self._step += 1

    # ---------------------------------------------------------------------------- step 1
    def advertise(self) -> AdvertiseKeys:
        self._enter("advertise")
        unsigned = AdvertiseKeys(
            **Message.base_of(self.setup),
            sender=self.participant,
            channel_key=public_bytes(self._channel),
            mask_key=public_bytes(self._mask_key),
            signature=b"",
        )
        signature = self._sign(unsigned.signed_payload())
        self._own_advert = replace(unsigned, signature=signature)
        return self._own_advert

    # ---------------------------------------------------------------------------- step 2
    def share_keys(self, directory: KeyDirectory) -> ShareKeys:
        self._enter("share_keys")
        setup = self.setup
        directory.check_bound(setup)
        adverts: dict[str, AdvertiseKeys] = {}
        neighbours = set(setup.neighbours(self.participant))
        for advert in directory.adverts:
            advert.check_bound(setup)
            if advert.sender in adverts:
                raise MessageRejected(f"the key directory lists {advert.sender!r} twice")
            # Only neighbours' keys are ever used here (SecAgg+ stays O(k) per participant).
            if advert.sender in neighbours and not self._verify(
                advert.sender, advert.signed_payload(), advert.signature
            ):
                raise MessageRejected(f"the keys of {advert.sender!r} are not signed by it")
            adverts[advert.sender] = advert
        if adverts.get(self.participant) != self._own_advert:
            raise MessageRejected("the key directory does not carry this participant's own keys")
        keys = [a.channel_key for a in adverts.values()] + [a.mask_key for a in adverts.values()]
        if len(set(keys)) != len(keys):
            raise MessageRejected("the key directory repeats a public key")
        if len(adverts) < setup.threshold:
            raise MessageRejected(
                f"only {len(adverts)} participants advertised keys (threshold {setup.threshold})"
            )
        holders = setup.holders(self.participant)
        live = [h for h in holders if h in adverts]
        if len(live) < setup.share_threshold:
            raise MessageRejected(
                f"only {len(live)} of this participant's share holders advertised keys "
                f"(needs {setup.share_threshold})"
            )
        self._adverts = adverts
        self._keys = directory.digest()
        self._self_seed = os.urandom(SEED_BYTES)
        self_shares = split_seed(self._self_seed, setup.share_threshold, len(holders))
        key_shares = split_seed(self._mask_seed, setup.share_threshold, len(holders))
        sealed: dict[str, bytes] = {}
        for index, holder in enumerate(holders):
            pair = (self_shares[index], key_shares[index])
            if holder == self.participant:
                self._held[holder] = pair
            elif holder in adverts:
                sealed[holder] = seal_shares(
                    self._channel,
                    adverts[holder].channel_key,
                    setup,
                    self.participant,
                    holder,
                    pair[0] + pair[1],
                )
        return ShareKeys(
            **Message.base_of(setup),
            sender=self.participant,
            sealed=sealed,
            commitment=commitment(setup, self.participant, self._self_seed),
        )

    # ---------------------------------------------------------------------------- step 3
    def mask_input(self, bundle: ShareBundle, encoded: np.ndarray) -> MaskedInput:
        """Upload ``encoded`` (ring elements, shape ``(dimension,)``) masked.

        Raises:
            MessageRejected: If the bundle is not bound to this round and participant, carries
                shares from a non-neighbour or ones that do not authenticate, or too few owners
                shared keys.
        """
        self._enter("mask_input")
        setup = self.setup
        bundle.check_bound(setup, self.participant)
        ring = setup.ring
        values = np.asarray(encoded)
        if values.shape != (ring.dimension,) or values.dtype != np.uint64:
            raise ValueError(f"the encoded input must be {ring.dimension} uint64 ring elements.")
        neighbours = set(setup.neighbours(self.participant))
        for owner, sealed in bundle.sealed.items():
            if owner not in neighbours or owner not in self._adverts:
                raise MessageRejected(f"the bundle carries shares of {owner!r}, not a neighbour")
            try:
                plain = open_shares(
                    self._channel,
                    self._adverts[owner].channel_key,
                    setup,
                    owner,
                    self.participant,
                    sealed,
                )
            except ValueError as error:
                raise MessageRejected(str(error)) from None
            if len(plain) != 2 * SEED_BYTES:
                raise MessageRejected(f"the shares of {owner!r} are malformed")
            self._held[owner] = (plain[:SEED_BYTES], plain[SEED_BYTES:])
        if len(bundle.sealed) + 1 < setup.share_threshold:
            raise MessageRejected(
                f"only {len(bundle.sealed)} neighbours shared keys; masking with fewer than "
                f"{setup.share_threshold - 1} would expose this participant's input"
            )
        masks = [self_mask(self._self_seed, setup, self.participant)]
        masks += [
            pairwise_mask(self._mask_key, self._adverts[v].mask_key, setup, self.participant, v)
            for v in bundle.sealed
        ]
        masked = ring_add(values & ring.mask, add_all(masks, ring), ring)
        return MaskedInput(**Message.base_of(setup), sender=self.participant, masked=masked)

    # ---------------------------------------------------------------------------- step 4
    def sign_survivors(self, survivors: SurvivorList) -> ConsistencySignature:
        self._enter("sign_survivors")
        setup = self.setup
        survivors.check_bound(setup)
        listed = survivors.survivors
        self._check_survivors(listed)
        self._signed = listed
        payload = consistency_payload(setup, self.participant, listed, self._keys)
        return ConsistencySignature(
            **Message.base_of(setup),
            sender=self.participant,
            survivors=listed,
            signature=self._sign(payload),
        )

    def _check_survivors(self, listed: tuple[str, ...]) -> None:
        if self.participant not in listed:
            raise MessageRejected("the survivor list omits this participant, which survived")
        unknown = [p for p in listed if p not in self._adverts]
        if unknown:
            raise MessageRejected(f"the survivor list names {unknown} who never advertised keys")
        if len(listed) < self.setup.threshold:
            raise MessageRejected(
                f"only {len(listed)} survivors (threshold {self.setup.threshold}): the sum of so "
                "few inputs is not released"
            )

    # ---------------------------------------------------------------------------- step 5
    def unmask(self, request: UnmaskRequest) -> UnmaskResponse:
        """Reveal, per peer, the one share the survivor list allows (the SecAgg rule).

        Raises:
            MessageRejected: If the request asks for both shares of a peer, differs from the
                survivor list this participant signed, carries fewer than ``t`` valid survivor
                signatures, or comes after this participant already answered one.
        """
        if self._step == len(_STEPS) - 1:
            raise MessageRejected(
                "already answered an unmask request this round; a second one could ask for the "
                "other share of a peer"
            )
        self._enter("unmask")
        setup = self.setup
        request.check_bound(setup)
        survivors, dropped = set(request.survivors), set(request.dropped)
        both = sorted(survivors & dropped)
        if both:
            raise MessageRejected(f"the server asks for both shares of {both}: refused")
        self._check_survivors(request.survivors)
        if request.survivors != self._signed:
            raise MessageRejected("the unmask request's survivors differ from the list signed")
        vouched = 0
        payload = consistency_payloads(setup, request.survivors, self._keys)
        for p, signature in sorted(request.signatures.items()):
            if vouched == setup.threshold:
                break
            vouched += p in survivors and self._verify(p, payload(p), signature)
        if vouched < setup.threshold:
            raise MessageRejected(
                f"only {vouched} valid survivor signatures (threshold {setup.threshold})"
            )
        self_shares = {p: s for p, (s, _) in self._held.items() if p in survivors}
        key_shares = {p: k for p, (_, k) in self._held.items() if p in dropped}
        self._held.clear()
        return UnmaskResponse(
            **Message.base_of(setup),
            sender=self.participant,
            self_mask_shares=self_shares,
            mask_key_shares=key_shares,
        )

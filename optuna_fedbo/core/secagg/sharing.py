"""Shamir shares of 16-byte seeds and their encrypted delivery from one participant to another.

Sharing is pycryptodome's ``Crypto.Protocol.SecretSharing.Shamir`` (GF(2^128), 16-byte secrets,
as Flower uses). A share travels through the server encrypted and authenticated for its holder:
ChaCha20-Poly1305 under ``HKDF-SHA256(X25519(c_owner, C_holder))`` (``info`` binding the setup and
the ordered pair), with the setup, owner and holder as associated data, so the server can neither
read, alter, nor move a share to another holder, round or federation.
"""

from __future__ import annotations

import os

from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from optuna_fedbo.core.secagg.masks import agree
from optuna_fedbo.core.secagg.masks import hkdf
from optuna_fedbo.core.secagg.setup import RoundSetup

SEED_BYTES = 16
_NONCE_BYTES = 12


def split_seed(seed: bytes, threshold: int, holders: int) -> list[bytes]:
    """Shares ``1 .. holders`` of a 16-byte ``seed``; any ``threshold`` of them rebuild it."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"Shamir secrets here are {SEED_BYTES} bytes, got {len(seed)}.")
    shares = Shamir.split(threshold, holders, seed)
    return [share for _, share in sorted(shares)]


def combine_seed(shares: dict[int, bytes]) -> bytes:
    """The seed from ``{index: share}`` (at least the threshold of them; all are used)."""
    return Shamir.combine(sorted(shares.items()))


def _channel(
    private: X25519PrivateKey, peer_public: bytes, setup: RoundSetup, owner: str, holder: str
) -> tuple[ChaCha20Poly1305, bytes]:
    info = setup.info("secagg share channel", pair=[owner, holder])
    key = hkdf(agree(private, peer_public), info)
    return ChaCha20Poly1305(key), setup.info("secagg share", owner=owner, holder=holder)


def seal_shares(
    private: X25519PrivateKey,
    holder_public: bytes,
    setup: RoundSetup,
    owner: str,
    holder: str,
    plaintext: bytes,
) -> bytes:
    """Encrypt ``owner``'s shares for ``holder`` (nonce followed by ciphertext)."""
    aead, associated = _channel(private, holder_public, setup, owner, holder)
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + aead.encrypt(nonce, plaintext, associated)


def open_shares(
    private: X25519PrivateKey,
    owner_public: bytes,
    setup: RoundSetup,
    owner: str,
    holder: str,
    sealed: bytes,
) -> bytes:
    """Decrypt shares ``owner`` sealed for ``holder``.

    Raises:
        ValueError: If the ciphertext was altered or made for another holder, owner or setup.
    """
    aead, associated = _channel(private, owner_public, setup, owner, holder)
    try:
        return aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], associated)
    except InvalidTag:
        raise ValueError(
            f"the shares of {owner!r} for {holder!r} do not authenticate (altered, or made for "
            "another round or participant)"
        ) from None

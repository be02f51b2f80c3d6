"""Masks: X25519 key agreement, HKDF-SHA256 and a ChaCha20 keystream expanded to ring elements.

* **Pairwise mask** of ``u`` and ``v``: ``HKDF-SHA256(X25519(s_u, S_v))`` with ``info`` binding
  the round setup and the (sorted) pair gives a 32-byte ChaCha20 key; the keystream over zeros,
  read as little-endian ``uint64`` and reduced modulo ``2^bits``, is the mask. ``u`` adds it when
  ``u < v`` and subtracts it when ``u > v``, so every pair cancels in the sum.
* **Self mask** of ``u``: the keystream of ``HKDF(b_u)`` for a fresh 16-byte per-round seed
  ``b_u`` (``info`` binds the setup and ``u``).
* **Mask key from a seed**: ``u``'s X25519 mask private key is ``HKDF(seed_u)`` for a fresh
  16-byte seed; the seed, not the 32-byte key, is what ``u`` secret-shares (one 16-byte Shamir
  secret instead of two halves, half the shares and interpolations; and a rebuilt seed is checked
  by rederiving the public key the participant advertised). 128 bits of seed match X25519's
  security level.

Each ChaCha20 key is used for one keystream only (it is derived per setup and pair/owner), so the
all-zero nonce is safe.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from cryptography.hazmat.primitives.ciphers import algorithms
from cryptography.hazmat.primitives.ciphers import Cipher
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.hazmat.primitives.serialization import PublicFormat
import numpy as np

from optuna_fedbo.core.secagg.ring import ring_sub
from optuna_fedbo.core.secagg.ring import RingSpec
from optuna_fedbo.core.secagg.setup import RoundSetup

_ZERO_NONCE = bytes(16)


def hkdf(secret: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF-SHA256 of ``secret`` (no salt) for ``info``."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(secret)


def public_bytes(key: X25519PrivateKey) -> bytes:
    """The raw 32-byte public key of ``key``."""
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def agree(private: X25519PrivateKey, peer_public: bytes) -> bytes:
    """X25519 shared secret with a peer's raw public key.

    Raises:
        ValueError: For a malformed or low-order public key.
    """
    return private.exchange(X25519PublicKey.from_public_bytes(peer_public))


def prg(key: bytes, ring: RingSpec) -> np.ndarray:
    """``ring.dimension`` pseudo-random ring elements from the ChaCha20 keystream of ``key``."""
    encryptor = Cipher(algorithms.ChaCha20(key, _ZERO_NONCE), mode=None).encryptor()
    stream = encryptor.update(bytes(8 * ring.dimension))
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64) & ring.mask


def mask_key_from_seed(seed: bytes, setup: RoundSetup, owner: str) -> X25519PrivateKey:
    """``owner``'s X25519 mask private key, derived from its 16-byte shared seed."""
    raw = hkdf(seed, setup.info("secagg mask key", owner=owner))
    return X25519PrivateKey.from_private_bytes(raw)


def pairwise_mask(
    private: X25519PrivateKey, peer_public: bytes, setup: RoundSetup, me: str, peer: str
) -> np.ndarray:
    """The mask ``me`` adds for ``peer``: ``+PRG`` if ``me < peer`` else ``-PRG`` (in the ring)."""
    pair = sorted((me, peer))
    key = hkdf(agree(private, peer_public), setup.info("secagg pairwise mask", pair=pair))
    stream = prg(key, setup.ring)
    zero = np.zeros(setup.ring.dimension, dtype=np.uint64)
    return stream if me < peer else ring_sub(zero, stream, setup.ring)


def self_mask(seed: bytes, setup: RoundSetup, owner: str) -> np.ndarray:
    """``owner``'s self mask from its 16-byte per-round seed."""
    return prg(hkdf(seed, setup.info("secagg self mask", owner=owner)), setup.ring)


def add_all(vectors: list[np.ndarray], ring: RingSpec) -> np.ndarray:
    """The ring sum of ``vectors`` (zero for none): summed in place modulo ``2^64``, which
    ``2^bits`` divides, and reduced once."""
    total = np.zeros(ring.dimension, dtype=np.uint64)
    for vector in vectors:
        np.add(total, np.asarray(vector, dtype=np.uint64), out=total)
    return total & ring.mask

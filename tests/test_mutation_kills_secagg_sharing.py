"""Sealed shares (``core/secagg/sharing.py``), in process: a share is sealed exactly as documented
(ChaCha20-Poly1305 under the HKDF of the X25519 agreement labelled with the ordered pair, the
setup, owner and holder as associated data), so a share cannot be reflected back to its owner
as the holder's (written to kill mutants of ``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
import pytest

from optuna_fedbo.core.secagg.masks import agree
from optuna_fedbo.core.secagg.masks import hkdf
from optuna_fedbo.core.secagg.masks import public_bytes
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.setup import RoundSetup
from optuna_fedbo.core.secagg.sharing import open_shares
from optuna_fedbo.core.secagg.sharing import seal_shares

SETUP = RoundSetup(
    "fed", 1, ("a", "b", "c"), 2, plan_ring(n_inputs=3, bound=1.0, step=1e-3, dimension=4)
)
OWNER, HOLDER = (X25519PrivateKey.from_private_bytes(bytes([i]) * 32) for i in (3, 4))
PLAIN = bytes(range(32))


def test_a_share_is_sealed_under_the_labelled_pair_key_with_owner_and_holder_bound() -> None:
    sealed = seal_shares(OWNER, public_bytes(HOLDER), SETUP, "a", "b", PLAIN)
    key = hkdf(
        agree(OWNER, public_bytes(HOLDER)), SETUP.info("secagg share channel", pair=["a", "b"])
    )
    associated = SETUP.info("secagg share", owner="a", holder="b")
    assert ChaCha20Poly1305(key).decrypt(sealed[:12], sealed[12:], associated) == PLAIN
    assert open_shares(HOLDER, public_bytes(OWNER), SETUP, "a", "b", sealed) == PLAIN


def test_a_share_reflected_back_to_its_owner_does_not_authenticate() -> None:
    # The X25519 agreement is symmetric: only the labels tell a->b from b->a.
    sealed = seal_shares(OWNER, public_bytes(HOLDER), SETUP, "a", "b", PLAIN)
    with pytest.raises(ValueError, match="do not authenticate"):
        open_shares(OWNER, public_bytes(HOLDER), SETUP, "b", "a", sealed)

"""The masks (``core/secagg/masks.py``), in process: every key is HKDF-derived with the label of
its purpose and bound to its owner (or pair) and setup, so that no two masks or keys of a round
can coincide; the empty ring sum is ring elements (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
import numpy as np

from optuna_fedbo.core.secagg.masks import add_all
from optuna_fedbo.core.secagg.masks import agree
from optuna_fedbo.core.secagg.masks import hkdf
from optuna_fedbo.core.secagg.masks import mask_key_from_seed
from optuna_fedbo.core.secagg.masks import pairwise_mask
from optuna_fedbo.core.secagg.masks import prg
from optuna_fedbo.core.secagg.masks import public_bytes
from optuna_fedbo.core.secagg.masks import self_mask
from optuna_fedbo.core.secagg.ring import plan_ring
from optuna_fedbo.core.secagg.setup import RoundSetup

RING = plan_ring(n_inputs=3, bound=1.0, step=1e-3, dimension=8)
SETUP = RoundSetup("fed", 1, ("a", "b", "c"), 2, RING)
SEED = bytes(range(16))


def test_hkdf_binds_its_info() -> None:
    assert hkdf(SEED, b"one") != hkdf(SEED, b"two")
    assert len(hkdf(SEED, b"one", 16)) == 16


def test_the_mask_key_is_the_labelled_hkdf_of_the_seed_for_its_owner() -> None:
    key = mask_key_from_seed(SEED, SETUP, "a")
    raw = hkdf(SEED, SETUP.info("secagg mask key", owner="a"))
    assert public_bytes(key) == public_bytes(X25519PrivateKey.from_private_bytes(raw))
    assert public_bytes(key) != public_bytes(mask_key_from_seed(SEED, SETUP, "b"))


def test_the_self_mask_is_the_labelled_hkdf_of_the_seed_for_its_owner() -> None:
    mask = self_mask(SEED, SETUP, "a")
    expected = prg(hkdf(SEED, SETUP.info("secagg self mask", owner="a")), RING)
    np.testing.assert_array_equal(mask, expected)
    assert not np.array_equal(mask, self_mask(SEED, SETUP, "b"))


def test_the_pairwise_mask_is_the_labelled_hkdf_of_the_agreement_for_the_sorted_pair() -> None:
    a, b = (X25519PrivateKey.from_private_bytes(bytes([i]) * 32) for i in (1, 2))
    label = SETUP.info("secagg pairwise mask", pair=["a", "b"])
    stream = prg(hkdf(agree(a, public_bytes(b)), label), RING)
    np.testing.assert_array_equal(pairwise_mask(a, public_bytes(b), SETUP, "a", "b"), stream)
    # b subtracts what a adds: the pair cancels in the sum.
    from_b = pairwise_mask(b, public_bytes(a), SETUP, "b", "a")
    np.testing.assert_array_equal(add_all([stream, from_b], RING), np.zeros(8, dtype=np.uint64))


def test_the_empty_ring_sum_is_ring_elements() -> None:
    total = add_all([], RING)
    assert total.dtype == np.uint64
    np.testing.assert_array_equal(total, np.zeros(8, dtype=np.uint64))

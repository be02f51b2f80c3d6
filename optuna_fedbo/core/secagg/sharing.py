"""Shamir shares of 16-byte seeds and their encrypted delivery from one participant to another.

Sharing is pycryptodome's ``Crypto.Protocol.SecretSharing.Shamir`` (GF(2^128), 16-byte secrets,
as Flower uses). A share travels through the server encrypted and authenticated for its holder:
ChaCha20-Poly1305 under ``HKDF-SHA256(X25519(c_owner, C_holder))`` (``info`` binding the setup and
the ordered pair), with the setup, owner and holder as associated data, so the server can neither
read, alter, nor move a share to another holder, round or federation.

Combining is pycryptodome's too, and pure Python: about 25 ms of one core for 17 shares, so the
server's hundreds per round (one per survivor and one per dropout) are spread over a pool of
worker processes (:func:`combine_seeds`, or :class:`Combiner`, which starts each combination
as soon as its shares are in; each call is the library's, unchanged).
"""

from __future__ import annotations

from collections.abc import Hashable
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
import gc
import logging
import multiprocessing
import os
import sys

from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from optuna_fedbo.core.secagg.masks import agree
from optuna_fedbo.core.secagg.masks import hkdf
from optuna_fedbo.core.secagg.setup import RoundSetup

_logger = logging.getLogger(__name__)

SEED_BYTES = 16
_NONCE_BYTES = 12
#: Fewest combinations per worker process (a fork costs milliseconds, a combination 25 ms).
_PER_WORKER = 16


def split_seed(seed: bytes, threshold: int, holders: int) -> list[bytes]:
    """Shares ``1 .. holders`` of a 16-byte ``seed``; any ``threshold`` of them rebuild it."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"Shamir secrets here are {SEED_BYTES} bytes, got {len(seed)}.")
    shares = Shamir.split(threshold, holders, seed)
    return [share for _, share in sorted(shares)]


def pool_size(jobs: int, workers: int | None = None) -> int:
    """Worker processes for ``jobs`` combinations: at most ``workers`` (default: the usable
    cores), at most one per :data:`_PER_WORKER` jobs; 1 (no pool) off Linux, where processes
    are not forked."""
    if not sys.platform.startswith("linux"):
        return 1
    cores = len(os.sched_getaffinity(0)) if workers is None else workers
    return max(1, min(cores, jobs // _PER_WORKER))


def combine_seeds(jobs: Sequence[dict[int, bytes]], *, workers: int | None = None) -> list[bytes]:
    """The seed of each ``{index: share}`` of ``jobs`` (exactly the threshold of shares of one
    secret, all used), in order: :class:`Combiner` with every job submitted at once."""
    combiner = Combiner(len(jobs), workers)
    for index, job in enumerate(jobs):
        combiner.submit(index, job)
    seeds = combiner.results()
    return [seeds[index] for index in range(len(jobs))]


class Combiner:
    """Rebuilds seeds as their shares come in: each :meth:`submit` starts one ``Shamir.combine``
    in a forked worker process, so that in a live round the combinations run while the server
    still waits for, and opens, the other answers.

    The combinations are independent calls of ``Shamir.combine``; with :func:`pool_size` above
    1 they run in forked worker processes that hold no secret but their jobs' shares and run
    nothing else (their garbage collector is off, so no object inherited from this process,
    such as a storage connection, is finalised in them). A pool that cannot start or loses a
    worker is logged and the combinations run in this process.

    Args:
        jobs: How many seeds the round will rebuild (sizes the pool, see :func:`pool_size`;
            with one worker or fewer, every combination runs in this process, at
            :meth:`results`).
        workers: The most worker processes (default: the usable cores).
    """

    def __init__(self, jobs: int, workers: int | None = None) -> None:
        self._count = pool_size(jobs, workers)
        self._pool: ProcessPoolExecutor | None = None
        self._jobs: dict[Hashable, list[tuple[int, bytes]]] = {}
        self._futures: dict[Hashable, Future[bytes]] = {}

    def submit(self, key: Hashable, shares: dict[int, bytes]) -> None:
        """Start rebuilding the seed ``key`` from ``{index: share}`` (exactly the threshold of
        shares of one secret, all used)."""
        ordered = sorted(shares.items())
        self._jobs[key] = ordered
        if self._count < 2:
            return
        try:
            if self._pool is None:
                context = multiprocessing.get_context("fork")
                self._pool = ProcessPoolExecutor(
                    self._count, mp_context=context, initializer=gc.disable
                )
            self._futures[key] = self._pool.submit(Shamir.combine, ordered)
        except (OSError, RuntimeError, BrokenProcessPool) as error:
            _logger.warning(f"Combining the Shamir shares in this process ({error!r}).")
            self._count = 1
            self.close()

    def results(self) -> dict[Hashable, bytes]:
        """Every submitted seed (waits for the workers; what a lost worker did not finish, or
        the pool did not take, is combined here). Closes the pool."""
        seeds: dict[Hashable, bytes] = {}
        try:
            for key, ordered in self._jobs.items():
                future = self._futures.get(key)
                if future is not None:
                    try:
                        seeds[key] = future.result()
                        continue
                    except BrokenProcessPool as error:
                        _logger.warning(f"Combining the Shamir shares here ({error!r}).")
                        self._futures.clear()
                seeds[key] = Shamir.combine(ordered)
        finally:
            self.close()
        return seeds

    def close(self) -> None:
        """Stop the workers (pending combinations are dropped)."""
        pool, self._pool = self._pool, None
        self._futures.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


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

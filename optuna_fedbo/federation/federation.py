"""The :class:`Federation` handle: create or load a federation by name from an Optuna storage."""

from __future__ import annotations

import math
import os
import threading
from typing import Any
from typing import TYPE_CHECKING

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage

from optuna_fedbo.federation._damage import FederationNotFoundError
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.creation import FederationCreation
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.lease import DEFAULT_LEASE_TTL
from optuna_fedbo.federation.lease import Lease
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.ledger import PrivacyLedger
from optuna_fedbo.federation.lifecycle import FederationSummary
from optuna_fedbo.federation.lifecycle import Lifecycle
from optuna_fedbo.federation.lifecycle import read_lifecycle
from optuna_fedbo.federation.lifecycle import summarize
from optuna_fedbo.federation.membership import Membership
from optuna_fedbo.federation.membership import Participant
from optuna_fedbo.federation.protocol import get_protocol
from optuna_fedbo.federation.records import check_client_id
from optuna_fedbo.federation.relay import Relay
from optuna_fedbo.federation.secagg.config import SecureAggregation
from optuna_fedbo.federation.secagg.distributed_dp import privacy_from_dict
from optuna_fedbo.federation.secagg.status import secagg_status
from optuna_fedbo.federation.site_counter import UploadSender
from optuna_fedbo.federation.status import FederationStatus
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.search_space import SearchSpaceEncoder

if TYPE_CHECKING:
    from optuna_fedbo.core.rff import RandomFourierFeatures
    from optuna_fedbo.federation.fts.config import FTSConfig
    from optuna_fedbo.federation.fts.messages import Broadcast
    from optuna_fedbo.federation.fts.subregions import SubregionPartition

_logger = optuna.logging.get_logger(__name__)


class Federation(FederationCreation, Membership, Relay):
    """A federation of participants tuning the same search space, stored in an Optuna storage.

    Use :meth:`create` or :meth:`load`; the constructor is internal. The object is thread-safe
    and cheap to share between the samplers of one process (they must share it when the storage
    is in-memory).

    Its methods come by concern: creating and loading (:mod:`.creation`), enrollment, joining
    and the roster (:mod:`.membership`), uploads and broadcasts through the relay
    (:mod:`.relay`); this class holds the configuration, the protocol's channel, the rounds,
    the status, the participants' leases and lifecycle, and the privacy ledger.
    """

    def __init__(
        self,
        store: FederationStore,
        config: FederationConfig,
        config_hash: str,
        trust: Trust,
        key_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._hash = config_hash
        self._trust = trust
        store.trust = trust
        self._key_dir = key_dir
        self._keys: dict[str, ParticipantKey] = {}
        self._public_keys: dict[str, bytes] = {}
        self._sender = UploadSender(store, trust)
        self._sent: dict[str, tuple[int, str, Any]] = {}
        self._encoder = SearchSpaceEncoder(config.search_space)
        self._lock = threading.Lock()
        self._channel: Any = None
        self._indices: dict[str, int] = {}
        self._privacy = None if config.privacy is None else privacy_from_dict(config.privacy)
        self._ledger: PrivacyLedger | None = None
        self._exhausted: dict[str, Any] | None = None

    # ---------------------------------------------------------------------- properties
    @property
    def name(self) -> str:
        """Federation name."""
        return self._config.name

    @property
    def storage(self) -> BaseStorage:
        """The storage holding the federation's state."""
        return self._store.storage

    @property
    def store(self) -> FederationStore:
        """Low-level access to the stored records."""
        return self._store

    @property
    def config(self) -> FederationConfig:
        """The frozen configuration."""
        return self._config

    @property
    def config_hash(self) -> str:
        """SHA-256 of the canonical configuration."""
        return self._hash

    @property
    def trust(self) -> Trust:
        """Signing, sealing and verification for this federation."""
        return self._trust

    @property
    def fingerprint(self) -> str:
        """The server's fingerprint (64 hex digits): give it out of band to participants."""
        return self._trust.identity.fingerprint

    @property
    def federation_id(self) -> str:
        """The federation's random id (names its key files)."""
        return self._trust.federation_id

    @property
    def key_dir(self) -> str | os.PathLike[str] | None:
        """The key directory given when loading (``None``: the per-user default)."""
        return self._key_dir

    @property
    def is_operator(self) -> bool:
        """Whether this process holds the server's private keys (can serve and enroll)."""
        return self._trust.server_keys is not None

    @property
    def search_space(self) -> dict[str, BaseDistribution]:
        """The shared search space (a copy)."""
        return dict(self._config.search_space)

    @property
    def n_clients(self) -> int:
        """Number ``N`` of registered participants."""
        return self._config.n_clients

    @property
    def protocol(self) -> ProtocolConfig:
        """The protocol configuration."""
        return self._config.protocol

    @property
    def seed(self) -> int:
        """The public seed."""
        return self._config.seed

    @property
    def privacy(self) -> DPConfig | None:
        """The differential privacy configuration (``delta`` resolved), or ``None``."""
        return self._privacy

    @property
    def secure_aggregation(self) -> SecureAggregation | None:
        """The secure aggregation the uploads go through, or ``None`` (none)."""
        stored = self._config.secure_aggregation
        return None if stored is None else SecureAggregation.from_dict(stored)

    @property
    def encoder(self) -> SearchSpaceEncoder:
        """The unit-cube encoding of the search space."""
        return self._encoder

    @property
    def fts(self) -> FTSConfig:
        """The protocol configuration, which must be an :class:`FTSConfig`."""
        if self._config.protocol.kind != "fts":
            raise ValueError(
                f"Federation {self.name!r} runs protocol {self._config.protocol.kind!r}, not FTS."
            )
        return self._config.protocol  # type: ignore[return-value]

    @property
    def channel(self) -> Any:
        """The participants' side of the federation's protocol (built once, through the
        protocol registry): e.g. :class:`~optuna_fedbo.federation.fts.channel.FTSChannel`."""
        with self._lock:
            if self._channel is None:
                self._channel = get_protocol(self.protocol.kind).channel(self)
            return self._channel

    # The FTS family's participant operations (see FTSChannel), kept on the handle.
    def _fts_channel(self) -> Any:
        self.fts  # noqa: B018 (raises ValueError for another protocol)
        return self.channel

    def features(self) -> RandomFourierFeatures:
        """The shared random features ``phi`` (identical for everyone: public seed)."""
        return self._fts_channel().features()

    def pooling_features(self) -> list[RandomFourierFeatures]:
        """FTS with ``aggregation="pooled"``: the feature blocks statistics are kept on."""
        return self._fts_channel().pooling_features()

    def partition(self) -> SubregionPartition:
        """The ``P`` equal-volume sub-regions of the encoded search space."""
        return self._fts_channel().partition()

    def subregion_of(self, index: int) -> int:
        """The sub-region assigned to participant ``index`` (round robin, as the authors do)."""
        return self._fts_channel().subregion_of(index)

    def assignment(self) -> np.ndarray:
        """The sub-region of every participant index, shape ``(N,)``."""
        return self._fts_channel().assignment()

    # ----------------------------------------------------------------------- rounds
    def open_round(self) -> int:
        """The round currently collecting uploads (the newest published round + 1)."""
        latest = self._store.latest()
        return 0 if latest is None else int(latest["round"]) + 1

    def latest_broadcast(self) -> Broadcast | None:
        """FTS: the newest published broadcast, or ``None`` before the first one."""
        return self._fts_channel().latest_broadcast()

    def wait_for_round(
        self, round_index: int, timeout: float, poll_interval: float = 0.05
    ) -> Broadcast | None:
        """FTS: wait at most ``timeout`` s for round ``round_index`` (or later); see
        :meth:`~optuna_fedbo.federation.fts.channel.FTSChannel.wait_for_round`."""
        return self._fts_channel().wait_for_round(round_index, timeout, poll_interval)

    def upload(
        self, client_id: str, omega: np.ndarray, *, n_observations: int, iteration: int
    ) -> int:
        """FTS: send a participant's vector to the open round; see
        :meth:`~optuna_fedbo.federation.fts.channel.FTSChannel.upload`."""
        return self._fts_channel().upload(
            client_id, omega, n_observations=n_observations, iteration=iteration
        )

    # ------------------------------------------------------------------------ status
    def status(self) -> FederationStatus:
        """Rounds, participants, and who is missing in the open round."""
        participants = tuple(self.participants())
        open_round = self.open_round()
        secure = None if self.secure_aggregation is None else secagg_status(self)
        sent = self._store.upload_keys(open_round) if secure is None else secure["taking_part"]
        uploaded = tuple(c for c in sent if c in participants)
        states = self.lifecycle().states
        missing = tuple(
            c
            for c in participants
            if c not in uploaded and (c not in states or states[c].status != "finished")
        )
        return FederationStatus(
            name=self.name,
            n_clients=self.n_clients,
            participants=participants,
            open_round=open_round,
            n_published=open_round,
            uploaded=uploaded,
            missing=missing,
            server=self._store.server_status(),
            privacy=None if self._privacy is None else self.privacy_ledger().summary(),
            secure_aggregation=secure,
        )

    # --------------------------------------------------------------------- lifecycle
    def lease(
        self,
        client_id: str,
        *,
        ttl: float = DEFAULT_LEASE_TTL,
        public: Any = None,
        worker: str | None = None,
    ) -> Lease:
        """Claim this process's worker lease of a participant id (see :mod:`.lease`).

        Raises:
            ParticipantBusyError: If a live process runs the worker named ``worker``.
            ValueError: If the participant is not enrolled or its key is not on this machine.
        """
        key = self._participant_key(check_client_id(client_id))
        return Lease(self, client_id, key=key, ttl=ttl, public=public, worker=worker)

    def lifecycle(self) -> Lifecycle:
        """Participants' states (active, finished, lost) and what keeps rounds from closing."""
        return read_lifecycle(self)

    def summary(self) -> FederationSummary:
        """Rounds published, privacy spent, and every participant's trials by kind."""
        return summarize(self)

    # ----------------------------------------------------------------------- privacy
    def privacy_ledger(self) -> PrivacyLedger:
        """The privacy ledger (readable by everyone; written by the server only).

        Raises:
            ValueError: If the federation has no differential privacy.
        """
        if self._privacy is None:
            raise ValueError(f"Federation {self.name!r} has no differential privacy (no ledger).")
        with self._lock:
            if self._ledger is None:
                self._ledger = PrivacyLedger(self._store, self._privacy, self.n_clients)
            return self._ledger

    def ledger_entries(self) -> list[LedgerEntry]:
        """Every accounted round of the privacy ledger (empty without differential privacy)."""
        return [] if self._privacy is None else self.privacy_ledger().entries()

    def budget_exhausted(self) -> dict[str, Any] | None:
        """The server's record of the round it refused to publish for the budget, or ``None``.

        Once set, the server publishes nothing more and participants use local TS. Without
        differential privacy (or without a budget) this is always ``None``.
        """
        if self._privacy is None or self._privacy.epsilon_budget is None:
            return None
        with self._lock:
            if self._exhausted is not None:
                return self._exhausted
        record = self._store.budget_exhausted()
        if record is not None:
            with self._lock:
                self._exhausted = record  # permanent: cache it
        return record

    def privacy_spent(self) -> tuple[float, float]:
        """``(epsilon, delta)`` spent so far.

        With a :class:`DPConfig`, epsilon after every round in the privacy ledger (every
        released broadcast, accounted before it became readable) at the configured delta.

        Without differential privacy nothing is protected: every mechanism is
        ``(inf, 0)``-DP, which is what is returned. For DP-Fed-PNE see
        :meth:`optuna_fedbo.federation.fedpne.channel.FedPNEChannel.privacy_spent`.
        """
        spent = getattr(self.channel, "privacy_spent", None)
        if spent is not None:
            return spent()
        if self._privacy is not None:
            return self.privacy_ledger().spent()
        return (math.inf, 0.0)

    def __repr__(self) -> str:
        return (
            f"Federation(name={self.name!r}, n_clients={self.n_clients}, "
            f"protocol={self.protocol!r}, config={self._hash[:12]})"
        )


__all__ = ["Federation", "FederationNotFoundError", "FederationStatus", "Participant"]

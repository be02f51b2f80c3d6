"""The :class:`Federation` handle: create or load a federation by name from an Optuna storage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import math
import os
import socket
import threading
import time
from typing import Any
from typing import TYPE_CHECKING

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage

from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.ledger import PrivacyLedger
from optuna_fedbo.federation.protocol import DEFAULT_PROTOCOL
from optuna_fedbo.federation.protocol import get_protocol
from optuna_fedbo.federation.store import check_client_id
from optuna_fedbo.federation.store import FederationNotFoundError
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.store import resolve_storage
from optuna_fedbo.search_space import SearchSpaceEncoder

if TYPE_CHECKING:
    from optuna_fedbo.core.rff import RandomFourierFeatures
    from optuna_fedbo.federation.fts.config import FTSConfig
    from optuna_fedbo.federation.fts.messages import Broadcast
    from optuna_fedbo.federation.fts.subregions import SubregionPartition

_logger = optuna.logging.get_logger(__name__)


def _check_privacy(
    privacy: Any, protocol: ProtocolConfig, n_clients: int
) -> dict[str, Any] | None:
    """The stored form of the privacy configuration (``delta`` resolved), or ``None``."""
    if privacy is None:
        return None
    if not isinstance(privacy, DPConfig):
        raise ValueError(
            f"privacy must be None or a DPConfig, got {privacy!r} (the DP-Fed-PNE reward "
            "privacy is configured in FedPNEConfig)."
        )
    protocol.check_privacy(privacy)
    return privacy.resolve(n_clients).to_dict()


@dataclass(frozen=True)
class Participant:
    """A participant's place in the federation.

    Attributes:
        client_id: Its id.
        index: Its index ``n`` in ``[0, N)`` (order of first join; never changes).
        subregion: The sub-region it explores at initialization (``n mod P``).
    """

    client_id: str
    index: int
    subregion: int


@dataclass(frozen=True)
class FederationStatus:
    """A snapshot of a federation for operators (``optuna-fedbo status``).

    Attributes:
        name: Federation name.
        n_clients: Registered participants ``N``.
        participants: Ids of the participants that joined, by index.
        open_round: The round currently collecting uploads.
        n_published: Number of published broadcasts.
        uploaded: Participants with an upload in the open round.
        missing: Joined participants without an upload in the open round.
        server: The server's last heartbeat record, if any.
        privacy: The privacy ledger's summary (``PrivacyLedger.summary``); ``None`` without
            differential privacy.
    """

    name: str
    n_clients: int
    participants: tuple[str, ...]
    open_round: int
    n_published: int
    uploaded: tuple[str, ...]
    missing: tuple[str, ...]
    server: dict[str, Any] | None
    privacy: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The status as a JSON object."""
        return {
            "name": self.name,
            "n_clients": self.n_clients,
            "participants": list(self.participants),
            "open_round": self.open_round,
            "n_published": self.n_published,
            "uploaded": list(self.uploaded),
            "missing": list(self.missing),
            "not_joined": self.n_clients - len(self.participants),
            "server": self.server,
            "privacy": self.privacy,
        }

    def format(self) -> str:
        """A human-readable summary."""
        lines = [
            f"federation     {self.name}",
            f"participants   {len(self.participants)} of {self.n_clients} joined",
            f"rounds         {self.n_published} published; round {self.open_round} open",
            f"uploaded       {len(self.uploaded)}: {', '.join(self.uploaded) or '-'}",
            f"missing        {len(self.missing)}: {', '.join(self.missing) or '-'}",
        ]
        not_joined = self.n_clients - len(self.participants)
        if not_joined:
            lines[-1] += f" (and {not_joined} not joined yet)"
        lines.append(format_server(self.server))
        if self.privacy is not None:
            lines += _format_privacy(self.privacy)
        return "\n".join(lines)


def format_server(server: dict[str, Any] | None) -> str:
    """The ``status`` line of a server heartbeat record (``None``: no server ever ran)."""
    if server is None:
        return "server         never seen"
    age = time.time() - float(server.get("heartbeat", 0.0))
    epoch = f", epoch {server['epoch']}" if "epoch" in server else ""
    return (
        f"server         {server.get('host')} pid {server.get('pid')}{epoch}, "
        f"last seen {age:.0f} s ago"
    )


def _format_privacy(summary: dict[str, Any]) -> list[str]:
    budget = summary["epsilon_budget"]
    spent = f"epsilon {summary['epsilon']:.4g}"
    if budget is not None:
        spent += f" of budget {budget:g}"
    lines = [
        f"privacy        {spent}, delta {summary['delta']:.3g} after "
        f"{summary['rounds_accounted']} accounted round(s) ({summary['accountant']} accountant)",
        f"mechanism      z {summary['noise_multiplier']:g}, q {summary['sample_rate']:g}, "
        f"S {summary['clip_norm']:g}, {summary['sampling']} sampling "
        f"({summary['neighbouring_relation']})",
    ]
    exhausted = summary["budget_exhausted"]
    if exhausted is not None:
        lines.append(
            f"budget         exhausted: round {exhausted['round']} not published (epsilon "
            f"would reach {exhausted['epsilon_next']:.4g}); participants use local TS"
        )
    return lines


class Federation:
    """A federation of participants tuning the same search space, stored in an Optuna storage.

    Use :meth:`create` or :meth:`load`; the constructor is internal. The object is thread-safe
    and cheap to share between the samplers of one process (they must share it when the storage
    is in-memory).
    """

    def __init__(self, store: FederationStore, config: FederationConfig, config_hash: str) -> None:
        self._store = store
        self._config = config
        self._hash = config_hash
        self._encoder = SearchSpaceEncoder(config.search_space)
        self._lock = threading.Lock()
        self._channel: Any = None
        self._indices: dict[str, int] = {}
        self._privacy = None if config.privacy is None else DPConfig.from_dict(config.privacy)
        self._ledger: PrivacyLedger | None = None
        self._exhausted: dict[str, Any] | None = None

    # ----------------------------------------------------------------------- lifecycle
    @classmethod
    def create(
        cls,
        name: str,
        *,
        search_space: Mapping[str, BaseDistribution],
        n_clients: int,
        storage: str | BaseStorage | None = None,
        protocol: ProtocolConfig | None = None,
        privacy: Any = None,
        seed: int = 0,
        load_if_exists: bool = False,
    ) -> Federation:
        """Create a federation.

        Args:
            name: Federation name (the name of its study in the storage).
            search_space: Parameter names to Optuna distributions, shared by every participant.
            n_clients: Number ``N`` of registered participants (public).
            storage: ``None`` (in-memory, one process), an RDB URL, a journal file
                (``journal:PATH`` or a ``.log`` path) or any ``BaseStorage``.
            protocol: The protocol; ``None`` is ``FTSConfig()``.
            privacy: ``None`` (no differential privacy) or a
                :class:`~optuna_fedbo.federation.dp_config.DPConfig`: the server then runs
                DP-FTS-DE's Algorithm 1 and accounts every round in the privacy ledger.
            seed: Public seed of the shared randomness (random features, sub-regions).
            load_if_exists: Load an existing federation of that name instead of failing, if and
                only if its configuration is identical.

        Raises:
            ValueError: On invalid arguments, or if the federation exists (with another
                configuration, or ``load_if_exists`` false).
        """
        protocol = get_protocol(DEFAULT_PROTOCOL).config() if protocol is None else protocol
        config = FederationConfig(
            name=name,
            search_space=search_space,
            n_clients=n_clients,
            protocol=protocol,
            privacy=_check_privacy(privacy, protocol, n_clients),
            seed=seed,
        )
        store = FederationStore(resolve_storage(storage), name)
        try:
            store.create(config.to_json(), config.hash)
        except DuplicatedStudyError:
            if not load_if_exists:
                raise ValueError(
                    f"A study named {name!r} already exists in this storage; use "
                    "Federation.load, or load_if_exists=True to join an identical federation."
                ) from None
            existing = cls._from_store(store, wait=5.0)
            differences = existing.config.differences(config)
            if differences:
                raise ValueError(
                    f"Federation {name!r} exists with a different configuration: "
                    + "; ".join(differences)
                ) from None
            return existing
        _logger.info(f"Created federation {name!r} (config {config.hash[:12]}).")
        return cls(store, config, config.hash)

    @classmethod
    def load(
        cls,
        name: str,
        storage: str | BaseStorage | None = None,
        *,
        search_space: Mapping[str, BaseDistribution] | None = None,
        protocol: ProtocolConfig | None = None,
        n_clients: int | None = None,
        seed: int | None = None,
        privacy: DPConfig | None = None,
    ) -> Federation:
        """Load a federation by name; optionally check that it is the one you expect.

        Args:
            name: Federation name.
            storage: The storage it lives in (as for :meth:`create`).
            search_space: If given, the search space you intend to tune; loading fails if the
                federation's differs.
            protocol: If given, the protocol configuration you expect.
            n_clients: If given, the number of participants you expect.
            seed: If given, the public seed you expect.
            privacy: If given, the differential privacy you expect (``delta=None`` stands for
                the default ``1 / N^1.1``); loading fails if the federation's differs.

        Raises:
            KeyError: If there is no federation of that name.
            ValueError: If an expected value differs from the stored configuration.
        """
        store = FederationStore(resolve_storage(storage), name)
        federation = cls._from_store(store, wait=0.0)
        config = federation.config
        problems = []
        if search_space is not None:
            expected = FederationConfig(
                name=name,
                search_space=search_space,
                n_clients=config.n_clients,
                protocol=config.protocol,
                privacy=config.privacy,
                seed=config.seed,
            )
            problems += config.differences(expected)
        if protocol is not None and protocol != config.protocol:
            problems.append(f"protocol: stored {config.protocol!r}, expected {protocol!r}")
        if n_clients is not None and n_clients != config.n_clients:
            problems.append(f"n_clients: stored {config.n_clients}, expected {n_clients}")
        if seed is not None and seed != config.seed:
            problems.append(f"seed: stored {config.seed}, expected {seed}")
        if privacy is not None and (
            federation.privacy is None or privacy.resolve(config.n_clients) != federation.privacy
        ):
            problems.append(f"privacy: stored {federation.privacy!r}, expected {privacy!r}")
        if problems:
            raise ValueError(
                f"Federation {name!r} does not match what you expect: " + "; ".join(problems)
            )
        return federation

    @classmethod
    def _from_store(cls, store: FederationStore, wait: float) -> Federation:
        text, config_hash = store.read_config(wait=wait)
        config = FederationConfig.from_json(text)
        if config.hash != config_hash:
            raise ValueError(
                f"The stored configuration of federation {store.name!r} does not match its hash; "
                "the storage was modified by hand."
            )
        return cls(store, config, config_hash)

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

    def partition(self) -> SubregionPartition:
        """The ``P`` equal-volume sub-regions of the encoded search space."""
        return self._fts_channel().partition()

    def subregion_of(self, index: int) -> int:
        """The sub-region assigned to participant ``index`` (round robin, as the authors do)."""
        return self._fts_channel().subregion_of(index)

    def assignment(self) -> np.ndarray:
        """The sub-region of every participant index, shape ``(N,)``."""
        return self._fts_channel().assignment()

    # --------------------------------------------------------------------- participants
    def participants(self) -> list[str]:
        """Ids of the participants that joined, by index (at most ``N``)."""
        return self._store.roster()[: self.n_clients]

    def index_of(self, client_id: str) -> int | None:
        """The index of a participant, or ``None`` if it has not joined."""
        with self._lock:
            if client_id in self._indices:
                return self._indices[client_id]
        roster = self.participants()
        if client_id not in roster:
            return None
        with self._lock:
            # Indices never change once assigned: cache them.
            self._indices.update((c, i) for i, c in enumerate(roster))
        return roster.index(client_id)

    def join(self, client_id: str) -> Participant:
        """Register a participant (idempotent: rejoining returns the same index).

        Raises:
            ValueError: If the id is invalid or ``N`` other participants have already joined.
        """
        check_client_id(client_id)
        roster = self._store.roster()
        if client_id not in roster[: self.n_clients]:
            if len(roster) >= self.n_clients:
                raise ValueError(self._full_message(client_id))
            self._store.register(client_id, {"host": socket.gethostname(), "pid": os.getpid()})
            roster = self._store.roster()
            if client_id not in roster[: self.n_clients]:
                raise ValueError(self._full_message(client_id))
        index = roster.index(client_id)
        subregion_of = getattr(self.channel, "subregion_of", None)
        subregion = 0 if subregion_of is None else subregion_of(index)
        return Participant(client_id=client_id, index=index, subregion=subregion)

    def _full_message(self, client_id: str) -> str:
        return (
            f"Federation {self.name!r} is full: its {self.n_clients} participants have joined "
            f"and {client_id!r} is not one of them."
        )

    # ----------------------------------------------------------------------- rounds
    def open_round(self) -> int:
        """The round currently collecting uploads (the newest published round + 1)."""
        latest = self._store.latest()
        return 0 if latest is None else int(latest["round"]) + 1

    def latest_broadcast(self) -> Broadcast | None:
        """FTS: the newest published broadcast, or ``None`` before the first one."""
        return self._fts_channel().latest_broadcast()

    def wait_for_round(
        self, round_index: int, timeout: float | None = None, poll_interval: float = 0.05
    ) -> Broadcast | None:
        """FTS: block until round ``round_index`` (or a later one) is published; see
        :meth:`~optuna_fedbo.federation.fts.channel.FTSChannel.wait_for_round`."""
        return self._fts_channel().wait_for_round(round_index, timeout, poll_interval)

    def upload(
        self,
        client_id: str,
        omega: np.ndarray,
        *,
        n_observations: int,
        iteration: int,
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
        uploaded = tuple(c for c in self._store.upload_keys(open_round) if c in participants)
        missing = tuple(c for c in participants if c not in uploaded)
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
        )

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

"""The :class:`Federation` handle: create or load a federation by name from an Optuna storage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace
import math
import os
import threading
import time
from typing import Any
from typing import TYPE_CHECKING
import warnings

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage

from optuna_fedbo.federation._openings import opening_for
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.keys import find_participant_key
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.keys import remember
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.lease import DEFAULT_LEASE_TTL
from optuna_fedbo.federation.lease import Lease
from optuna_fedbo.federation.ledger import format_summary
from optuna_fedbo.federation.ledger import LedgerEntry
from optuna_fedbo.federation.ledger import PrivacyLedger
from optuna_fedbo.federation.lifecycle import FederationSummary
from optuna_fedbo.federation.lifecycle import Lifecycle
from optuna_fedbo.federation.lifecycle import read_lifecycle
from optuna_fedbo.federation.lifecycle import summarize
from optuna_fedbo.federation.location import persists_keys
from optuna_fedbo.federation.pinning import lost_message
from optuna_fedbo.federation.pinning import pin_joined
from optuna_fedbo.federation.pinning import verify_stored_config
from optuna_fedbo.federation.preset import Preset
from optuna_fedbo.federation.preset import unpack
from optuna_fedbo.federation.protocol import DEFAULT_PROTOCOL
from optuna_fedbo.federation.protocol import get_protocol
from optuna_fedbo.federation.site_counter import UploadSender
from optuna_fedbo.federation.store import check_client_id
from optuna_fedbo.federation.store import FederationNotFoundError
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.store import resolve_storage
from optuna_fedbo.federation.trust import text_digest
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.watermark import check_participant
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
    resolved = privacy.resolve(n_clients).to_dict()
    weakness = privacy.weakness(n_clients)
    if weakness is not None:
        warnings.warn(weakness, UserWarning, stacklevel=3)
    return resolved


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
            lines += format_summary(self.privacy)
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


_EXISTS = "A study named {name!r} already exists in this storage; use Federation.load, or \
load_if_exists=True to join an identical federation."


class Federation:
    """A federation of participants tuning the same search space, stored in an Optuna storage.

    Use :meth:`create` or :meth:`load`; the constructor is internal. The object is thread-safe
    and cheap to share between the samplers of one process (they must share it when the storage
    is in-memory).
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
        protocol: ProtocolConfig | Preset | None = None,
        privacy: Any = None,
        seed: int = 0,
        load_if_exists: bool = False,
        key_dir: str | os.PathLike[str] | None = None,
        direction: str | None = None,
    ) -> Federation:
        """Create a federation.

        Args:
            name: Federation name (the name of its study in the storage).
            search_space: Parameter names to Optuna distributions, shared by every participant.
            n_clients: Number ``N`` of registered participants (public).
            storage: ``None`` (in-memory, one process), an RDB URL, a journal file
                (``journal:PATH`` or a ``.log`` path) or any ``BaseStorage``.
            protocol: The protocol; ``None`` is ``FTSConfig()``. A
                :class:`~optuna_fedbo.federation.preset.Preset` (e.g. ``presets.dp_fts_de()``)
                brings its privacy along (an explicit ``privacy`` replaces it).
            privacy: ``None`` (no differential privacy) or a
                :class:`~optuna_fedbo.federation.dp_config.DPConfig`: the server then runs
                DP-FTS-DE's Algorithm 1 and accounts every round in the privacy ledger.
            seed: Public seed of the shared randomness (random features, sub-regions).
            load_if_exists: Load an existing federation of that name instead of failing, if and
                only if its configuration is identical.
            key_dir: Where the server's private keys are written (mode 0600): by default
                ``$OPTUNA_FEDBO_HOME`` or ``~/.config/optuna-fedbo``. The operator keeps them:
                the server needs them, and they never enter the storage. In an in-memory
                storage (one process) the keys stay in memory.
            direction: ``"maximize"`` or ``"minimize"``: sites must match (``None``: unchecked).

        The server's public keys become part of the configuration, which the server signs;
        :attr:`fingerprint` names the server (give it out of band to participants on other
        machines, with ``optuna-fedbo fingerprint``).

        Raises:
            ValueError: On invalid arguments, or if the federation exists (with another
                configuration, or ``load_if_exists`` false).
        """
        protocol, privacy = unpack(protocol, privacy)
        protocol = get_protocol(DEFAULT_PROTOCOL).config() if protocol is None else protocol
        server_keys = ServerKeys.generate()
        config = FederationConfig(
            name=name,
            search_space=search_space,
            n_clients=n_clients,
            protocol=protocol,
            privacy=_check_privacy(privacy, protocol, n_clients),
            seed=seed,
            server=server_keys.identity.to_dict(),
            direction=direction,
        )
        # Defaults that depend on the federation are stored explicitly.
        resolved = protocol.resolve(SearchSpaceEncoder(config.search_space), privacy)
        resolved.check_creation(n_clients, privacy)
        config = replace(config, protocol=resolved)
        store = FederationStore(resolve_storage(storage), name)
        try:
            store.main_attrs()
            exists = True
        except KeyError:
            exists = False
        if exists:
            if not load_if_exists:
                raise ValueError(_EXISTS.format(name=name))
            return cls._load_existing(store, config, key_dir)
        lost = lost_message(store, key_dir)
        if lost is not None:  # created or joined from this key directory before: never replaced
            if load_if_exists:  # (or being created by another process right now)
                return cls._load_existing(store, config, key_dir)
            raise ValueError(lost)
        server_keys.bind(name, config.hash)
        trust = Trust(server_keys.identity, config.hash, server_keys)
        pin_path = pin_joined(store, trust, key_dir)
        key_path = None
        if persists_keys(store.storage):
            key_path = server_keys.save(key_dir)
        else:
            remember(server_keys.identity.federation_id, None, server_keys)
        text = config.to_json()
        try:
            store.create(text, config.hash, trust.sign_config(text))
        except DuplicatedStudyError:
            for path in filter(None, (pin_path, key_path)):
                path.unlink(missing_ok=True)
            if not load_if_exists:
                raise ValueError(_EXISTS.format(name=name)) from None
            return cls._load_existing(store, config, key_dir)
        _logger.info(
            f"Created federation {name!r} (config {config.hash[:12]}, server fingerprint "
            f"{server_keys.identity.fingerprint})"
            + ("" if key_path is None else f"; its server keys are in {key_path} (keep them)")
            + "."
        )
        return cls(store, config, config.hash, trust, key_dir)

    @classmethod
    def _load_existing(
        cls,
        store: FederationStore,
        config: FederationConfig,
        key_dir: str | os.PathLike[str] | None,
    ) -> Federation:
        existing = cls._from_store(store, wait=5.0, server_fingerprint=None, key_dir=key_dir)
        differences = existing.config.differences(config)
        if differences:
            raise ValueError(
                f"Federation {store.name!r} exists with a different configuration: "
                + "; ".join(differences)
            )
        return existing

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
        server_fingerprint: str | None = None,
        key_dir: str | os.PathLike[str] | None = None,
    ) -> Federation:
        """Load a federation by name; optionally check that it is the one you expect.

        The stored configuration must be signed by the server whose fingerprint is pinned:
        ``server_fingerprint`` if given (from the operator, out of band), else the one found in
        the key directory (the server's own key file on the operator's machine, or the
        participant credential installed with ``optuna-fedbo import-credential``). A
        configuration that does not verify is refused, and so is another federation's (see
        :mod:`.pinning`): one stored under another name, one the server's key file was not made
        for, or another one than this key directory created or joined under that name there.

        Args:
            name: Federation name.
            storage: The storage it lives in (as for :meth:`create`).
            search_space: If given, the search space you intend to tune; loading fails if the
                federation's differs.
            protocol: If given, the protocol configuration you expect.
            n_clients: If given, the number of participants you expect.
            seed: If given, the public seed you expect.
            privacy: If given, the differential privacy you expect (``delta=None`` stands for
                the default); loading fails if the federation's differs.
            server_fingerprint: The server's fingerprint (64 hex digits), given out of band.
            key_dir: The key directory (default ``$OPTUNA_FEDBO_HOME`` or
                ``~/.config/optuna-fedbo``).

        Raises:
            KeyError: If there is no federation of that name.
            ValueError: If an expected value differs from the stored configuration, or the
                configuration does not verify against the pinned fingerprint (or none is
                pinned), is another federation's, or a key file cannot be used.
        """
        store = FederationStore(resolve_storage(storage, must_exist=True), name)
        federation = cls._from_store(
            store, wait=0.0, server_fingerprint=server_fingerprint, key_dir=key_dir
        )
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
    def _from_store(
        cls,
        store: FederationStore,
        wait: float,
        *,
        server_fingerprint: str | None,
        key_dir: str | os.PathLike[str] | None,
    ) -> Federation:
        config, config_hash, trust = verify_stored_config(
            store, wait=wait, server_fingerprint=server_fingerprint, key_dir=key_dir
        )
        return cls(store, config, config_hash, trust, key_dir)

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

    # --------------------------------------------------------------------- participants
    def participants(self) -> list[str]:
        """Ids of the enrolled participants, by index (at most ``N``)."""
        return list(self._enrolled())

    def _enrolled(self) -> dict[str, bytes]:
        """The first ``N`` enrolled participants (id -> public key), read once; caches keys."""
        enrolled = dict(list(self._store.roster().items())[: self.n_clients])
        with self._lock:
            self._public_keys.update(enrolled)
            # Indices never change once assigned: cache them.
            self._indices.update((c, i) for i, c in enumerate(enrolled))
        return enrolled

    def public_key_of(self, client_id: str) -> bytes | None:
        """The enrolled public signing key of a participant, or ``None``.

        Enrollments are append-only and never change: known keys are cached, and the roster
        is read again only for an id not seen yet.
        """
        with self._lock:
            if client_id in self._public_keys:
                return self._public_keys[client_id]
        return self._enrolled().get(client_id)

    def index_of(self, client_id: str) -> int | None:
        """The index of a participant, or ``None`` if it is not enrolled."""
        with self._lock:
            if client_id in self._indices:
                return self._indices[client_id]
        roster = self.participants()
        return roster.index(client_id) if client_id in roster else None

    def enroll(self, client_id: str, public_key: bytes | None = None) -> ParticipantKey:
        """Enroll a participant (the operator only: the server signs the enrollment).

        Args:
            client_id: The participant's id.
            public_key: Its raw Ed25519 public key (from ``optuna-fedbo keygen`` on its
                machine); ``None`` makes a new key pair, returned as a credential to hand over
                (``ParticipantKey.save(name, path)``).

        Returns:
            The participant's credential (without a private key if ``public_key`` was given).

        Raises:
            ValueError: If this process does not hold the server's keys, the id is invalid or
                already enrolled with another key, or the federation is full.
        """
        check_client_id(client_id)
        if not self.is_operator:
            raise ValueError(
                f"Only the operator of federation {self.name!r} can enroll participants (its "
                "server keys are not on this machine)."
            )
        if public_key is None:
            key = ParticipantKey.generate(self.federation_id, client_id, self.fingerprint)
        else:
            key = ParticipantKey(
                self.federation_id, client_id, None, self.fingerprint, public_key=public_key
            )
        roster = self._store.roster()
        if client_id in roster:
            if public_key is not None and roster[client_id] == public_key:
                return key
            raise ValueError(
                f"{client_id!r} is already enrolled in federation {self.name!r} with another "
                "key; enroll the participant under a new id."
            )
        if len(roster) >= self.n_clients:
            raise ValueError(self._full_message(client_id))
        self._store.register(client_id, self._trust.enrollment(client_id, key.public_key))
        if client_id not in self._enrolled():
            raise ValueError(self._full_message(client_id))
        return key

    def _participant_key(self, client_id: str) -> ParticipantKey:
        """This process's signing key of ``client_id`` (verified against the enrollment).

        Raises:
            ValueError: If the participant is not enrolled, or this machine has no (valid) key
                of it; nothing is written.
        """
        with self._lock:
            if client_id in self._keys:
                return self._keys[client_id]
        enrolled = self.public_key_of(client_id)
        key = find_participant_key(self.federation_id, client_id, self._key_dir)
        if enrolled is None:
            raise ValueError(
                f"{client_id!r} is not enrolled in federation {self.name!r}: the operator enrolls "
                f"it with `optuna-fedbo enroll --storage URL --name {self.name} --client-id "
                f"{client_id} --out {client_id}.cred`, and you install the file with "
                f"`optuna-fedbo import-credential {client_id}.cred`."
            )
        where = ParticipantKey.path(self.federation_id, client_id, self._key_dir)
        if key is None or not key.has_private_key:
            raise ValueError(
                f"{client_id!r} is enrolled in federation {self.name!r} but its private key is "
                f"not on this machine ({where}): install the credential the operator gave you "
                "with `optuna-fedbo import-credential FILE`."
            )
        if key.public_key != enrolled:
            raise ValueError(
                f"The key of {client_id!r} in {where} is not the one enrolled in federation "
                f"{self.name!r}: install the credential the operator gave you for it."
            )
        with self._lock:
            self._keys[client_id] = key
        return key

    def join(self, client_id: str) -> Participant:
        """Take part as ``client_id`` (idempotent: rejoining returns the same index).

        The participant must be enrolled and this machine must hold its key. On the operator's
        machine (this process holds the server's keys, e.g. one machine, or an in-memory
        storage) a participant that is not enrolled yet is enrolled here, with a key made in
        the key directory. The key directory pins the configuration joined (per storage and
        name), so that another federation under this name is refused later.

        Raises:
            ValueError: If the id is invalid, not enrolled (and this is not the operator), its
                key is missing or does not match, or ``N`` others are enrolled. Nothing is
                written to the storage then.
        """
        check_client_id(client_id)
        enrolled = self._enrolled()
        if client_id not in enrolled and self.is_operator:
            if len(enrolled) >= self.n_clients:
                raise ValueError(self._full_message(client_id))
            key = find_participant_key(self.federation_id, client_id, self._key_dir)
            if key is None:
                key = ParticipantKey.generate(self.federation_id, client_id, self.fingerprint)
                if not persists_keys(self._store.storage):
                    remember(self.federation_id, client_id, key)
                else:
                    try:
                        key.save(self.name, key_dir=self._key_dir)
                    except FileExistsError:  # another process of this id made it first
                        key = ParticipantKey.load(
                            ParticipantKey.path(self.federation_id, client_id, self._key_dir)
                        )
            self.enroll(client_id, key.public_key)
            enrolled = self._enrolled()
        self._participant_key(client_id)
        pin_joined(self._store, self._trust, self._key_dir)
        index = list(enrolled).index(client_id)
        subregion_of = getattr(self.channel, "subregion_of", None)
        subregion = 0 if subregion_of is None else subregion_of(index)
        return Participant(client_id=client_id, index=index, subregion=subregion)

    def _full_message(self, client_id: str) -> str:
        return (
            f"Federation {self.name!r} is full: its {self.n_clients} participants are enrolled "
            f"and {client_id!r} is not one of them."
        )

    # ------------------------------------------------------------------------ uploads
    def send_upload(
        self,
        client_id: str,
        round_index: int,
        payload: str,
        resend: Any = None,
    ) -> None:
        """Seal ``payload`` to the server, sign it as ``client_id`` and write it to the round.

        Args:
            client_id: The participant (enrolled, with its key on this machine).
            round_index: The open round (the upload is bound to its opening).
            payload: The protocol's upload message.
            resend: ``() -> None`` that sends the upload again to the open round, called if
                the broadcast of ``round_index`` shows that the upload missed it (arrived after
                the server closed the round); ``None``: only warn.

        Raises:
            ValueError: If the participant cannot sign, the sealed upload is over the bound, or
                the round is not open yet.
            LedgerRollbackError: If the federation went backwards (a rolled-back storage).
            KeyError: If the round is closed (its uploads study is gone).
        """
        key = self._participant_key(client_id)
        if self._privacy is not None:
            check_participant(self)  # never into a federation that went backwards
        opening = opening_for(self._store, round_index)
        sealed = self._sender.send(key, round_index, payload, opening)  # :mod:`.site_counter`
        with self._lock:
            self._sent[client_id] = (round_index, text_digest(sealed)[:32], resend)

    def has_sent(self, client_id: str, round_index: int) -> bool:
        """Whether the round holds an upload signed by ``client_id`` (its own, not a forgery)."""
        public_key = self.public_key_of(client_id)
        text = self._store.read_uploads(round_index).get(client_id)
        if public_key is None or text is None:
            return False
        try:
            self._trust.check_upload(
                text, client_id=client_id, public_key=public_key, round_index=round_index
            )
        except UploadRejected:
            return False
        return True

    def read_upload(self, round_index: int, client_id: str) -> str:
        """The opened upload of ``client_id`` in a round (the operator only: for inspection).

        Raises:
            KeyError: If there is no such upload.
            ValueError: If it does not verify or this process cannot open it.
        """
        public_key = self.public_key_of(client_id)
        if public_key is None:
            raise ValueError(f"{client_id!r} is not enrolled in federation {self.name!r}.")
        text = self._store.read_uploads(round_index)[client_id]
        return self._trust.open_upload(
            text, client_id=client_id, public_key=public_key, round_index=round_index
        )[1]

    def read_broadcast(self, trial_id: int) -> tuple[int, str]:
        """``(round, payload)`` of a verified broadcast; checks this process's receipts.

        Raises:
            UntrustedRecordError: If the broadcast does not verify.
        """
        broadcast = self._store.read_verified_broadcast(trial_id)
        missed = []
        with self._lock:
            for client_id, (sent_round, receipt, resend) in list(self._sent.items()):
                if sent_round == broadcast.round and receipt not in broadcast.receipts:
                    missed.append((client_id, resend))
                if sent_round <= broadcast.round:
                    del self._sent[client_id]
        for client_id, resend in missed:
            _logger.warning(
                f"{client_id}: the upload for round {broadcast.round} of {self.name!r} is not "
                "in its broadcast (it arrived after the server closed the round, or the server "
                "refused it)"
                + ("; it is re-sent to the open round." if resend is not None else ".")
            )
            if resend is not None:
                try:
                    resend()
                except (KeyError, ValueError) as error:
                    _logger.warning(f"{client_id}: re-sending the upload failed ({error}).")
        return broadcast.round, broadcast.payload

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
        uploaded = tuple(c for c in self._store.upload_keys(open_round) if c in participants)
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

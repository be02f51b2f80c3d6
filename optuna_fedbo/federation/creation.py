"""Creating and loading a federation: :meth:`Federation.create` and :meth:`Federation.load`.

Creation makes the server's keys, resolves the protocol's defaults for the search space, signs
the configuration and stores it; loading verifies the stored configuration against the pinned
server fingerprint (:mod:`.pinning`) and, optionally, against what the caller expects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
import os
from typing import Any
from typing import Self
import warnings

import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage

from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.keys import remember
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.location import persists_keys
from optuna_fedbo.federation.pinning import lost_message
from optuna_fedbo.federation.pinning import pin_joined
from optuna_fedbo.federation.pinning import verify_stored_config
from optuna_fedbo.federation.preset import Preset
from optuna_fedbo.federation.preset import unpack
from optuna_fedbo.federation.protocol import DEFAULT_PROTOCOL
from optuna_fedbo.federation.protocol import get_protocol
from optuna_fedbo.federation.secagg.config import stored_secure_aggregation
from optuna_fedbo.federation.secagg.distributed_dp import distributed_privacy
from optuna_fedbo.federation.storages import resolve_storage
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.search_space import SearchSpaceEncoder

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


_EXISTS = "A study named {name!r} already exists in this storage; use Federation.load, or \
load_if_exists=True to join an identical federation."


class FederationCreation:
    """The constructors of :class:`~optuna_fedbo.federation.Federation` (a base class of it:
    ``cls(store, config, config_hash, trust, key_dir)`` is ``Federation.__init__``)."""

    config: FederationConfig
    privacy: DPConfig | None

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
        secure_aggregation: Any = None,
    ) -> Self:
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
            secure_aggregation: ``None`` or a
                :class:`~optuna_fedbo.federation.secagg.SecureAggregation`: the server then
                learns only the sum of at least ``t`` participants' uploads.

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
        secure = stored_secure_aggregation(secure_aggregation, resolved, privacy, n_clients)
        stored_privacy = config.privacy
        if secure is not None and stored_privacy is not None:  # noise added by participants
            stored_privacy = distributed_privacy(stored_privacy, resolved, secure, n_clients)
        config = replace(
            config, protocol=resolved, privacy=stored_privacy, secure_aggregation=secure
        )
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
    ) -> Self:
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
    ) -> Self:
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
    ) -> Self:
        config, config_hash, trust = verify_stored_config(
            store, wait=wait, server_fingerprint=server_fingerprint, key_dir=key_dir
        )
        return cls(store, config, config_hash, trust, key_dir)


__all__ = ["FederationCreation"]

"""A participant's access to a Fed-PNE federation: the published phase, uploads, waiting, status.

Everything here reads what every participant may read (the configuration, the broadcasts, the
roster) and writes only the participant's own upload key of the open round.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
import math
import threading
import time
from typing import Any

import numpy as np
import optuna

from optuna_fedbo.core.fedpne import FederatedDPGuarantee
from optuna_fedbo.core.fedpne import FedPNEParams
from optuna_fedbo.core.fedpne import FedPNEServerState
from optuna_fedbo.core.fedpne import Node
from optuna_fedbo.core.fedpne import Partition
from optuna_fedbo.core.fedpne import Phase
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fedpne.config import FedPNEConfig
from optuna_fedbo.federation.fedpne.config import NodeSpace
from optuna_fedbo.federation.fedpne.messages import encode_means_upload
from optuna_fedbo.federation.fedpne.messages import parse_phase_broadcast
from optuna_fedbo.federation.fedpne.messages import PhaseBroadcast
from optuna_fedbo.federation.lease import lease_book
from optuna_fedbo.federation.status import format_server
from optuna_fedbo.federation.trust import UntrustedRecordError

_logger = optuna.logging.get_logger(__name__)


@dataclass(frozen=True)
class PhaseView:
    """What a participant knows of the protocol's progress.

    Attributes:
        phase: The phase being pulled now (the newest published one; phase 1 before any
            broadcast).
        best: The best node of the last closed phase (the root before the first close).
        broadcast: The newest broadcast, or ``None`` before the first.
    """

    phase: Phase
    best: Node
    broadcast: PhaseBroadcast | None

    @property
    def round(self) -> int:
        """The round collecting this phase's uploads (``phase.index - 1``)."""
        return self.phase.index - 1


@dataclass(frozen=True)
class FedPNEStatus:
    """A Fed-PNE federation at a glance (``optuna-fedbo status``).

    Attributes:
        name: Federation name.
        n_clients: ``M``.
        participants: Ids of the participants that joined, by index.
        phase: The open phase.
        uploaded: Participants whose means for the open phase arrived.
        missing: Participants the server still waits for (empty in the final phase, which has
            no uploads); participants that have not joined yet are counted in ``not_joined``.
        departed: The missing participants that have finished or are lost, with that status:
            they will not upload, so the phase closes at its round timeout.
        best: The current best node and the parameters of its centre.
        communication: The server's communication counters (closed phases so far).
        privacy: The DP-Fed-PNE guarantee, or ``None``.
        server: The server's last heartbeat record, if any.
    """

    name: str
    n_clients: int
    participants: tuple[str, ...]
    phase: Phase
    uploaded: tuple[str, ...]
    missing: tuple[str, ...]
    best: Node
    recommended_params: dict[str, Any]
    communication: dict[str, int]
    privacy: FederatedDPGuarantee | None
    server: dict[str, Any] | None
    departed: dict[str, str] = field(default_factory=dict)

    @property
    def not_joined(self) -> int:
        """Registered participants that have not joined yet."""
        return self.n_clients - len(self.participants)

    def to_dict(self) -> dict[str, Any]:
        """The status as a JSON object."""
        return {
            "name": self.name,
            "protocol": "fedpne",
            "n_clients": self.n_clients,
            "participants": list(self.participants),
            "not_joined": self.not_joined,
            "phase": self.phase.to_dict(),
            "open_round": self.phase.index - 1,
            "uploaded": list(self.uploaded),
            "missing": list(self.missing),
            "departed": dict(self.departed),
            "best": self.best.key,
            "recommended_params": self.recommended_params,
            "communication": self.communication,
            "privacy": None if self.privacy is None else self.privacy.to_dict(),
            "server": self.server,
        }

    def format(self) -> str:
        """A human-readable summary."""
        phase = self.phase
        kind = "final phase (horizon reached, no uploads)" if phase.final else "phase"
        lines = [
            f"federation     {self.name} (Fed-PNE)",
            f"participants   {len(self.participants)} of {self.n_clients} joined",
            f"{kind:<14} {phase.index}: {len(phase.nodes)} nodes at depth {phase.depth}, "
            f"t = {phase.pulls_per_node} pulls per node, {phase.budget} pulls per participant "
            f"(pulls {phase.start + 1}-{phase.start + phase.budget})",
        ]
        if not phase.final:
            lines.append(f"uploaded       {len(self.uploaded)}: {', '.join(self.uploaded) or '-'}")
            waiting = [
                f"{c} ({self.departed[c]})" if c in self.departed else c for c in self.missing
            ]
            if self.not_joined:
                waiting.append(f"{self.not_joined} not joined")
            lines.append(f"missing        {len(self.missing)}: {', '.join(waiting) or '-'}")
        lines.append(f"best node      {self.best.key}: {self.recommended_params}")
        lines.append(
            f"communication  {self.communication.get('rounds', 0)} rounds, "
            f"{self.communication.get('nodes_per_client', 0)} node means per participant"
        )
        if self.privacy is not None:
            lines.append(
                f"privacy        ({self.privacy.epsilon:g}, {self.privacy.delta:g}, "
                f"{self.privacy.n_clients})-federated DP, sigma = {self.privacy.sigma:.4g} "
                f"(exact epsilon {self.privacy.tight_epsilon:.4g})"
            )
        lines.append(format_server(self.server))
        return "\n".join(lines)


class FedPNEChannel:
    """The participant side of a Fed-PNE federation.

    Args:
        federation: A federation whose protocol is a :class:`FedPNEConfig`.

    Raises:
        ValueError: If the protocol is not Fed-PNE or cannot run with this federation.
    """

    def __init__(self, federation: Federation) -> None:
        if not isinstance(federation, Federation):
            raise ValueError(f"federation must be a Federation, got {federation!r}.")
        config = federation.protocol
        if not isinstance(config, FedPNEConfig):
            raise ValueError(
                f"Federation {federation.name!r} runs protocol {config.kind!r}, not Fed-PNE "
                "(create it with protocol=FedPNEConfig(...))."
            )
        config.check_federation(federation.n_clients)
        if federation.config.privacy is not None:
            raise ValueError(
                "Fed-PNE's differential privacy is configured in FedPNEConfig(dp_epsilon=..., "
                "dp_delta=...) (client-side noise, Appendix D); create the federation with "
                "privacy=None."
            )
        self.federation = federation
        self.config: FedPNEConfig = config
        self.space = NodeSpace(federation.encoder)
        self.params: FedPNEParams = config.params(federation.n_clients, self.space.dim)
        self.partition: Partition = config.partition(self.space.dim, federation.seed)
        # Phase 1 follows from the configuration alone (Algorithm 2, lines 2 and 5-8).
        self.initial_phase: Phase = FedPNEServerState(self.params, self.partition).current_phase()
        self._lock = threading.Lock()
        self._cached: tuple[int, PhaseView] | None = None

    # ----------------------------------------------------------------------- reading
    def view(self) -> PhaseView:
        """The newest published phase and the current best node."""
        store = self.federation.store
        latest = store.latest()
        if latest is None:
            return PhaseView(self.initial_phase, self.partition.root(), None)
        trial_id = int(latest["trial_id"])
        with self._lock:
            if self._cached is not None and self._cached[0] == trial_id:
                return self._cached[1]
        try:
            round_index, payload = self.federation.read_broadcast(trial_id)
        except UntrustedRecordError as error:
            store.warn_once(
                f"broadcast-read:{trial_id}",
                f"Ignoring broadcast trial {trial_id} of {self.federation.name!r}: {error}.",
            )
            with self._lock:
                if self._cached is not None:
                    return self._cached[1]
            return PhaseView(self.initial_phase, self.partition.root(), None)
        broadcast = parse_phase_broadcast(payload)
        if broadcast.round != round_index or broadcast.config_hash != self.federation.config_hash:
            raise ValueError(f"Broadcast trial {trial_id} does not belong to this federation.")
        view = PhaseView(broadcast.next_phase, broadcast.best, broadcast)
        with self._lock:
            self._cached = (trial_id, view)
        return view

    def wait_for_phase(
        self, index: int, timeout: float, poll_interval: float = 0.25
    ) -> PhaseView | None:
        """Block until phase ``index`` (or a later one) is published, at most ``timeout`` s.

        Returns:
            The newest view, or ``None`` if ``timeout`` seconds passed first.
        """
        deadline = time.monotonic() + timeout
        while True:
            view = self.view()
            if view.phase.index >= index:
                return view
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll_interval)

    def point(self, node: Node, rng: np.random.Generator | None = None) -> dict[str, Any]:
        """The parameters of one pull of ``node``: its representative point.

        The centre, or with ``representative="uniform"`` a uniform point of the node drawn
        from ``rng`` (required then).
        """
        return self.space.decode(self.partition.points(node, 1, rng)[0])

    def centre(self, node: Node) -> dict[str, Any]:
        """The parameters of the centre of ``node``."""
        return self.space.decode(self.partition.centre(node))

    def recommended_params(self) -> dict[str, Any]:
        """The centre of the current best node, as parameters."""
        return self.centre(self.view().best)

    # ----------------------------------------------------------------------- uploads
    def has_uploaded(self, client_id: str, phase_index: int) -> bool:
        """Whether ``client_id``'s own signed means for phase ``phase_index`` are in its open
        round (something else written under its key by someone with the URL does not count)."""
        return self.federation.has_sent(client_id, phase_index - 1)

    def upload(self, client_id: str, phase: Phase, means: dict[str, float]) -> bool:
        """Send a participant's node means for ``phase`` (Algorithm 1, line 10).

        Returns:
            ``True`` if written; ``False`` if the phase is no longer open (the server closed it
            without this participant), in which case nothing is sent.

        Raises:
            ValueError: If the participant has not joined, the phase is final or not yet
                published, or the means do not cover the phase's nodes.
        """
        if self.federation.index_of(client_id) is None:
            raise ValueError(f"{client_id!r} has not joined federation {self.federation.name!r}.")
        if phase.final:
            raise ValueError(f"Phase {phase.index} is final: it has no upload.")
        if set(means) != {node.key for node in phase.nodes}:
            raise ValueError(f"The means do not cover exactly the nodes of phase {phase.index}.")
        current = self.view().phase
        if current.index > phase.index:
            return False
        if current.index < phase.index:
            raise ValueError(f"Phase {phase.index} is not published yet (open: {current.index}).")
        payload = encode_means_upload(
            config_hash=self.federation.config_hash,
            round_index=phase.index - 1,
            phase_index=phase.index,
            client_id=client_id,
            means=means,
        )
        try:
            self.federation.send_upload(client_id, phase.index - 1, payload)
        except Exception:
            # The round was closed and discarded between reading the pointer and writing
            # (KeyError, or on SQLite a StaleDataError while the server deletes it).
            if self.view().phase.index > phase.index:
                return False
            raise
        return True

    def privacy_spent(self) -> tuple[float, float]:
        """``(epsilon, delta)`` spent so far: see :func:`privacy_spent`."""
        return privacy_spent(self.federation)

    # ------------------------------------------------------------------------ status
    def status(self) -> FedPNEStatus:
        """Phase, who is missing, the best node, communication and privacy."""
        federation = self.federation
        view = self.view()
        participants = tuple(federation.participants())
        if view.phase.final:
            uploaded: tuple[str, ...] = ()
            missing: tuple[str, ...] = ()
        else:
            keys = federation.store.upload_keys(view.round)
            uploaded = tuple(c for c in participants if c in keys)
            missing = tuple(c for c in participants if c not in keys)
        states = lease_book(federation).states() if missing else {}
        departed = {c: states[c].status for c in missing if c in states and states[c].departed}
        communication = (
            dict(view.broadcast.communication)
            if view.broadcast is not None
            else {"rounds": 0, "nodes_per_client": 0, "uploaded_means": 0}
        )
        return FedPNEStatus(
            name=federation.name,
            n_clients=federation.n_clients,
            participants=participants,
            phase=view.phase,
            uploaded=uploaded,
            missing=missing,
            best=view.best,
            recommended_params=self.centre(view.best),
            communication=communication,
            privacy=self.config.guarantee(federation.n_clients),
            server=federation.store.server_status(),
            departed=departed,
        )


def privacy_spent(federation: Federation) -> tuple[float, float]:
    """``(epsilon, delta)`` spent by a Fed-PNE federation so far.

    Plain Fed-PNE releases exact node means: ``(inf, 0)``. DP-Fed-PNE is
    ``(epsilon, delta, M)``-federated DP for the whole run (Theorem D.1: each reward enters one
    node mean, released once, so nothing composes over phases): the exact epsilon of the
    worst-case release (one reward, the analytic Gaussian mechanism,
    :attr:`FederatedDPGuarantee.tight_epsilon`, at most the configured ``dp_epsilon`` whenever
    the classic calibration applies) and ``dp_delta``. The noise is added on the participant, so
    this holds from the first upload on (even against the server) and never grows.
    """
    config = federation.protocol
    if not isinstance(config, FedPNEConfig):
        raise ValueError(f"Federation {federation.name!r} does not run Fed-PNE.")
    guarantee = config.guarantee(federation.n_clients)
    if guarantee is None:
        return (math.inf, 0.0)
    return (guarantee.tight_epsilon, guarantee.delta)


__all__ = ["FedPNEChannel", "FedPNEStatus", "PhaseView", "privacy_spent"]

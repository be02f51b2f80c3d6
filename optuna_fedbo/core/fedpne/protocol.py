"""The Fed-PNE server as a persistent state machine (Algorithm 2 of the Fed-PNE paper).

One *phase* ``p`` is one communication round: the server publishes the node set ``K^p`` with the
pull count ``t = ceil(tau_h / M)``; every client pulls every node ``t`` times and uploads one
mean per node (Algorithm 1); the server averages, eliminates and expands (lines 11-16), then
sizes the next phase (lines 5-8).

Choices the paper leaves open (each is documented where it is implemented):

* **Horizon.** ``T`` is the number of pulls per client ("while not reaching the time horizon T").
  A phase starts whenever pulls remain; if its length ``|K^p| t`` exceeds the remaining budget it
  is published as the *final* phase: clients pull its schedule (node by node, Algorithm 1 line 7)
  until their ``T``-th pull and upload nothing, since no decision follows. When the budget is
  exactly used up the final phase is empty (nothing left to pull). Pulls never exceed ``T``.
* **Recommendation** (what to deploy; the paper measures only cumulative regret). The best
  node ``(h^p, i^p)`` of the last closed phase (the root before the first close): the largest
  estimated global mean among the deepest nodes decided on, always a survivor, and the centre
  of its cell (:meth:`FedPNEServerState.recommended_point`). Not the last pull, and not the
  best single reward (a noise winner). The paper never shrinks ``K^p`` to one node (survivors
  always have ``k >= 2`` children), so Fed-PNE keeps refining until the horizon.
* **Depth.** The tree is finite in floating point: past :attr:`Partition.max_depth` the
  survivors are pulled again instead of split (only the tuning variant's short phases get
  there, after hundreds of phases).
* **Missing clients.** The protocol is synchronous (Section 2.3). ``close_phase(force=True)``
  closes with the clients that reported, averaging over them and using ``T_{h,i} = M' t`` with
  ``M'`` reporters. That estimates the reporters' average objective, not the federation's: a
  documented departure from the paper, for an operator to use deliberately.
* **Duplicates.** A second upload identical to the first is accepted and ignored (retries after a
  crash are safe); a different one is rejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
import logging
import math
from typing import Any

import numpy as np

from optuna_fedbo.core.fedpne.elimination import beam_scores
from optuna_fedbo.core.fedpne.elimination import children_of
from optuna_fedbo.core.fedpne.elimination import eliminate
from optuna_fedbo.core.fedpne.elimination import global_means
from optuna_fedbo.core.fedpne.params import FedPNEParams
from optuna_fedbo.core.fedpne.partition import as_node
from optuna_fedbo.core.fedpne.partition import Node
from optuna_fedbo.core.fedpne.partition import Partition
from optuna_fedbo.core.fedpne.schedule import expand_until_enough

_logger = logging.getLogger(__name__)

_STATE_FORMAT = "fedpne-server-state/1"


@dataclass(frozen=True)
class Phase:
    """What the server broadcasts for phase ``p`` (Algorithm 2, line 9).

    Attributes:
        index: ``p`` (1-based).
        depth: ``h``, the depth of every node of ``K^p``.
        nodes: ``K^p`` in index order (empty only for the empty final phase).
        tau: ``tau_h``.
        pulls_per_node: ``t_{m,h,i} = ceil(tau_h / M)``.
        start: Pulls each client made before this phase.
        budget: Pulls each client makes in this phase: ``min(|K^p| t, T - start)``.
        final: No upload follows (the horizon ends inside or at the start of this phase).
    """

    index: int
    depth: int
    nodes: tuple[Node, ...]
    tau: int
    pulls_per_node: int
    start: int
    budget: int
    final: bool

    @property
    def length(self) -> int:
        """``|T^p| = |K^p| t``, the full phase length per client."""
        return len(self.nodes) * self.pulls_per_node

    def schedule(self) -> list[Node]:
        """The node of every pull of this phase, in order (Algorithm 1, lines 6-7).

        Each node is pulled ``t`` times in a row, nodes in index order; the list is cut at
        ``budget`` (only the final phase is cut).
        """
        order = [node for node in self.nodes for _ in range(self.pulls_per_node)]
        return order[: self.budget]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able plain data."""
        return {
            "index": self.index,
            "depth": self.depth,
            "nodes": [node.key for node in self.nodes],
            "tau": self.tau,
            "pulls_per_node": self.pulls_per_node,
            "start": self.start,
            "budget": self.budget,
            "final": self.final,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Phase:
        """Inverse of :meth:`to_dict`."""
        return cls(
            index=int(data["index"]),
            depth=int(data["depth"]),
            nodes=tuple(Node.from_key(key) for key in data["nodes"]),
            tau=int(data["tau"]),
            pulls_per_node=int(data["pulls_per_node"]),
            start=int(data["start"]),
            budget=int(data["budget"]),
            final=bool(data["final"]),
        )


@dataclass(frozen=True)
class PhaseReport:
    """The server's decision at the end of a phase (Algorithm 2, lines 11-16).

    Attributes:
        phase: The closed phase.
        means: ``mu_{h,i}`` per node.
        width: ``b_{h,i}`` (the same for every node of the phase: they share ``T_{h,i}``).
        total_pulls: ``T_{h,i} = M' t`` with ``M'`` contributing clients.
        best: ``(h^p, i^p)``.
        eliminated: ``E^p``.
        survivors: ``K^p \\ E^p``.
        contributors: The clients whose means were averaged, sorted.
        forced: Whether the phase was closed without every client.
    """

    phase: Phase
    means: dict[Node, float]
    width: float
    total_pulls: int
    best: Node
    eliminated: tuple[Node, ...]
    survivors: tuple[Node, ...]
    contributors: tuple[str, ...]
    forced: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-able plain data."""
        return {
            "phase": self.phase.to_dict(),
            "means": {node.key: value for node, value in self.means.items()},
            "width": self.width,
            "total_pulls": self.total_pulls,
            "best": self.best.key,
            "eliminated": [node.key for node in self.eliminated],
            "survivors": [node.key for node in self.survivors],
            "contributors": list(self.contributors),
            "forced": self.forced,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseReport:
        """Inverse of :meth:`to_dict`."""
        return cls(
            phase=Phase.from_dict(data["phase"]),
            means={Node.from_key(k): float(v) for k, v in data["means"].items()},
            width=float(data["width"]),
            total_pulls=int(data["total_pulls"]),
            best=Node.from_key(data["best"]),
            eliminated=tuple(Node.from_key(k) for k in data["eliminated"]),
            survivors=tuple(Node.from_key(k) for k in data["survivors"]),
            contributors=tuple(str(c) for c in data["contributors"]),
            forced=bool(data["forced"]),
        )


class FedPNEServerState:
    """The server side of Fed-PNE / DP-Fed-PNE (Algorithms 2 and 4) as a state machine.

    Args:
        params: The constants (horizon, ``M``, ``nu1``, ``rho``, ``c``, ``c1``, ``delta``, DP).
        partition: The public partition.
        client_ids: The ``M`` client identifiers (strings, unique). Defaults to
            ``"0", ..., "M-1"``.

    Raises:
        ValueError: If the client ids do not match ``params.n_clients`` or are not unique
            strings, or the first phase would exceed ``params.max_phase_nodes``.
    """

    def __init__(
        self,
        params: FedPNEParams,
        partition: Partition,
        client_ids: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(params, FedPNEParams):
            raise ValueError("params must be a FedPNEParams.")
        if not isinstance(partition, Partition):
            raise ValueError("partition must be a Partition.")
        if client_ids is None:
            client_ids = [str(m) for m in range(params.n_clients)]
        client_ids = list(client_ids)
        if not all(isinstance(c, str) and c for c in client_ids):
            raise ValueError("client_ids must be non-empty strings.")
        if len(set(client_ids)) != len(client_ids):
            raise ValueError("client_ids must be unique.")
        if len(client_ids) != params.n_clients:
            raise ValueError(
                f"{len(client_ids)} client ids given but params.n_clients = {params.n_clients}."
            )
        self._params = params
        self._partition = partition
        self._client_ids = tuple(client_ids)
        self._history: list[PhaseReport] = []
        self._submissions: dict[str, dict[Node, float]] = {}
        # Algorithm 2, line 2: K^1 = {(0, 1)}; lines 5-8 size the first phase.
        self._phase = self._make_phase(index=1, nodes=(partition.root(),), start=0)

    # ----------------------------------------------------------------------------- accessors
    @property
    def params(self) -> FedPNEParams:
        """The constants."""
        return self._params

    @property
    def partition(self) -> Partition:
        """The public partition."""
        return self._partition

    @property
    def client_ids(self) -> tuple[str, ...]:
        """The registered clients."""
        return self._client_ids

    @property
    def history(self) -> tuple[PhaseReport, ...]:
        """The reports of all closed phases, oldest first."""
        return tuple(self._history)

    @property
    def finished(self) -> bool:
        """Whether the horizon has been reached by the published phases (no more uploads)."""
        return self._phase.final

    def current_phase(self) -> Phase:
        """The phase clients are working on: ``K^p`` and ``t`` (Algorithm 2, lines 8-9)."""
        return self._phase

    def submissions(self) -> dict[str, dict[str, float]]:
        """The uploads received for the current phase: ``client -> {node key -> mean}``."""
        return {
            client: {node.key: value for node, value in means.items()}
            for client, means in self._submissions.items()
        }

    def missing(self) -> list[str]:
        """The clients that have not uploaded for the current phase, in registration order."""
        return [c for c in self._client_ids if c not in self._submissions]

    def ready(self) -> bool:
        """Whether every client has uploaded and the phase can be closed."""
        return not self._phase.final and not self.missing()

    def recommendation(self) -> Node:
        """The best node of the last closed phase (the root before any close): a survivor."""
        if not self._history:
            return self._partition.root()
        return self._history[-1].best

    def recommended_point(self) -> np.ndarray:
        """The centre of :meth:`recommendation`'s cell."""
        return self._partition.centre(self.recommendation())

    def eliminated(self) -> set[Node]:
        """Every node eliminated so far."""
        return {node for report in self._history for node in report.eliminated}

    def pulls_used(self) -> int:
        """Pulls per client in all closed phases."""
        return self._phase.start

    def communication(self) -> dict[str, int]:
        """Communication so far (Remark 3.5, Appendix C.2 and E.4).

        Returns:
            ``rounds``: closed phases (upload rounds); ``nodes_per_client``: node means each
            client uploaded, ``sum_p |K^p|`` over closed phases (the paper's "information per
            client"); ``uploaded_means``: all numbers uploaded, ``sum_p M' |K^p|``;
            ``broadcast_nodes``: nodes broadcast per client over all published phases,
            including the current one.
        """
        closed = self._history
        return {
            "rounds": len(closed),
            "nodes_per_client": sum(len(r.phase.nodes) for r in closed),
            "uploaded_means": sum(len(r.phase.nodes) * len(r.contributors) for r in closed),
            "broadcast_nodes": sum(len(r.phase.nodes) for r in closed) + len(self._phase.nodes),
        }

    # ----------------------------------------------------------------------------- transitions
    def submit(
        self,
        client_id: str,
        node_means: Mapping[Node | str, float],
        *,
        phase: int | None = None,
    ) -> bool:
        """Record a client's node means for the current phase (Algorithm 2, line 10).

        Args:
            client_id: A registered client.
            node_means: ``node (or "h:i") -> local mean``, exactly the nodes of ``K^p``.
            phase: If given, the phase index the client computed these means for; a stale or
                future index is rejected.

        Returns:
            ``True`` if recorded, ``False`` if it repeats the client's earlier identical upload.

        Raises:
            ValueError: Unknown client, wrong phase, final phase, wrong node set, non-finite
                value, or a second upload that differs from the first.
        """
        if client_id not in self._client_ids:
            raise ValueError(f"Unknown client {client_id!r}.")
        current = self._phase
        if phase is not None and phase != current.index:
            raise ValueError(
                f"Client {client_id!r} uploaded for phase {phase}, but phase {current.index} "
                "is open."
            )
        if current.final:
            raise ValueError(
                f"Phase {current.index} is the final phase (horizon reached): no uploads."
            )
        if not isinstance(node_means, Mapping):
            raise ValueError("node_means must be a mapping node -> mean.")
        means: dict[Node, float] = {}
        for key, value in node_means.items():
            node = as_node(key)
            if node in means:
                raise ValueError(f"Node {node.key} appears twice in the upload.")
            if isinstance(value, bool):
                raise ValueError(f"Node {node.key}: the mean must be a number, got {value!r}.")
            try:
                number = float(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"Node {node.key}: the mean must be a number.") from exc
            if not math.isfinite(number):
                raise ValueError(f"Node {node.key}: the mean must be finite, got {number!r}.")
            means[node] = number
        expected = set(current.nodes)
        if set(means) != expected:
            extra = sorted(n.key for n in set(means) - expected)
            absent = sorted(n.key for n in expected - set(means))
            raise ValueError(
                f"Client {client_id!r}'s upload does not match phase {current.index}'s nodes "
                f"(unexpected: {extra}, missing: {absent})."
            )
        previous = self._submissions.get(client_id)
        if previous is not None:
            if previous == means:
                return False
            raise ValueError(
                f"Client {client_id!r} already uploaded different means for phase {current.index}."
            )
        self._submissions[client_id] = means
        return True

    def close_phase(self, *, force: bool = False) -> PhaseReport:
        """Average, eliminate, expand and publish the next phase (Algorithm 2, lines 11-16, 4-8).

        Args:
            force: Close with the clients that uploaded (at least one) instead of requiring all.

        Returns:
            The report of the closed phase.

        Raises:
            ValueError: If the phase is final, or not every client has uploaded (without
                ``force``), or nobody has.
        """
        current = self._phase
        if current.final:
            raise ValueError(
                f"Phase {current.index} is final (horizon reached); nothing to close."
            )
        if not self._submissions:
            raise ValueError(f"No client has uploaded for phase {current.index}.")
        if not force and self.missing():
            raise ValueError(
                f"Phase {current.index} still waits for clients {self.missing()}; "
                "use force=True to close without them."
            )
        contributors = tuple(sorted(self._submissions))
        means = global_means(self._submissions, current.nodes)
        total_pulls = len(contributors) * current.pulls_per_node
        width = self._params.width(total_pulls)
        outcome = eliminate(
            means,
            {node: width for node in current.nodes},
            self._params.smoothness,
            self._params.max_survivors,
            beam_scores(self._submissions, means, self._params.spread_bonus),
        )
        next_start = current.start + current.length
        # Build the next phase before touching any state: a failure leaves the state unchanged.
        if current.depth < self._partition.max_depth:
            next_nodes = children_of(outcome.survivors, self._partition)
        else:
            next_nodes = outcome.survivors  # cells as small as floating point allows
        next_phase = self._make_phase(index=current.index + 1, nodes=next_nodes, start=next_start)
        report = PhaseReport(
            phase=current,
            means=means,
            width=width,
            total_pulls=total_pulls,
            best=outcome.best,
            eliminated=outcome.eliminated,
            survivors=outcome.survivors,
            contributors=contributors,
            forced=len(contributors) < len(self._client_ids),
        )
        self._history.append(report)
        self._submissions = {}
        self._phase = next_phase
        _logger.debug(
            "Fed-PNE phase %d closed: depth %d, %d nodes, %d eliminated, best %s (%.4f); "
            "next phase %d: %d nodes at depth %d, t=%d, budget %d%s.",
            current.index,
            current.depth,
            len(current.nodes),
            len(outcome.eliminated),
            outcome.best.key,
            means[outcome.best],
            next_phase.index,
            len(next_phase.nodes),
            next_phase.depth,
            next_phase.pulls_per_node,
            next_phase.budget,
            " (final)" if next_phase.final else "",
        )
        return report

    def _make_phase(self, *, index: int, nodes: tuple[Node, ...], start: int) -> Phase:
        params = self._params
        remaining = params.horizon - start
        if remaining <= 0:
            # Horizon exactly used up: an empty final phase, nothing left to pull.
            depth = nodes[0].depth
            return Phase(index, depth, (), 0, 0, start, 0, True)
        nodes, depth = expand_until_enough(
            nodes,
            self._partition,
            n_clients=params.n_clients,
            tau_of_depth=params.tau,
            max_nodes=params.max_phase_nodes,
        )
        tau = params.tau(depth)
        t = params.pulls_per_client(depth)
        length = len(nodes) * t
        final = length > remaining
        return Phase(index, depth, nodes, tau, t, start, min(length, remaining), final)

    # ----------------------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """The whole state as JSON-able plain data (uploads of the open phase included)."""
        return {
            "format": _STATE_FORMAT,
            "params": self._params.to_dict(),
            "partition": self._partition.to_dict(),
            "client_ids": list(self._client_ids),
            "phase": self._phase.to_dict(),
            "submissions": self.submissions(),
            "history": [report.to_dict() for report in self._history],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FedPNEServerState:
        """Rebuild a state saved by :meth:`to_dict` (nothing uploaded is lost).

        Raises:
            ValueError: If the data is not a saved Fed-PNE server state.
        """
        if not isinstance(data, dict) or data.get("format") != _STATE_FORMAT:
            raise ValueError(f"Not a saved Fed-PNE server state (format {_STATE_FORMAT!r}).")
        state = cls.__new__(cls)
        state._params = FedPNEParams.from_dict(data["params"])
        state._partition = Partition.from_dict(data["partition"])
        state._client_ids = tuple(str(c) for c in data["client_ids"])
        if len(set(state._client_ids)) != state._params.n_clients:
            raise ValueError("Saved client ids do not match params.n_clients.")
        state._history = [PhaseReport.from_dict(r) for r in data["history"]]
        state._phase = Phase.from_dict(data["phase"])
        state._submissions = {}
        for client, means in data["submissions"].items():
            state.submit(client, means)
        return state

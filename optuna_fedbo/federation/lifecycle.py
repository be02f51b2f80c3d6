"""A federation's lifecycle: who runs, who finished, what keeps rounds from closing, the end.

Read by ``optuna-fedbo status`` (and ``--watch``), by participants (which warn once about each
problem, so that a federation never silently does nothing), and by the server (``serve`` ends when
every registered participant has finished, and prints :class:`FederationSummary`).
"""

from __future__ import annotations

from dataclasses import dataclass
import math
import time
from typing import Any
from typing import NamedTuple
from typing import TYPE_CHECKING

from optuna_fedbo.federation.finished import FINISHED_KEY
from optuna_fedbo.federation.finished import finished_message
from optuna_fedbo.federation.lease import lease_book
from optuna_fedbo.federation.lease import ParticipantState

if TYPE_CHECKING:
    from optuna_fedbo.federation.federation import Federation

#: A server whose heartbeat is older than this many heartbeat intervals (and at least a minute)
#: is reported as not seen recently.
SERVER_STALE_INTERVALS = 12
SERVER_STALE_MIN_SECONDS = 60.0

COUNT_KINDS = ("initial", "local", "federated")


class Problem(NamedTuple):
    """Something that keeps a federation from publishing rounds.

    Attributes:
        kind: ``"no-server"``, ``"server-down"`` (not seen recently), ``"server-stopped"``
            (its serve ended), ``"finished"`` (the federation is over: see
            :mod:`~optuna_fedbo.federation.finished`) or ``"roster"`` (too few participants run
            for the server's closing policy).
        text: What is wrong and what to do about it.
    """

    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Lifecycle:
    """Participants' states and the problems that keep the federation from progressing.

    Attributes:
        n_clients: Registered participants ``N``.
        roster: Ids of the participants that joined, by index.
        states: Lifecycle state by participant id (participants never seen are absent).
        problems: Why rounds are not (or cannot be) published (once every participant has
            ended, only that no server was ever seen).
        server_stopped: Why the server stopped, if its last heartbeat says it did.
    """

    n_clients: int
    roster: tuple[str, ...]
    states: dict[str, ParticipantState]
    problems: tuple[Problem, ...]
    server_stopped: str | None = None

    @property
    def ended(self) -> bool:
        """Whether all ``N`` participants joined and each has finished or is lost."""
        return len(self.roster) >= self.n_clients and all(
            c in self.states and self.states[c].departed for c in self.roster
        )

    def status_of(self, client_id: str) -> str:
        state = self.states.get(client_id)
        return "joined" if state is None else state.status

    def to_dict(self) -> dict[str, Any]:
        return {
            "participants": {
                c: (self.states[c].to_dict() if c in self.states else {"status": "joined"})
                for c in self.roster
            },
            "not_joined": self.n_clients - len(self.roster),
            "ended": self.ended,
            "server_stopped": self.server_stopped,
            "problems": [p.text for p in self.problems],
        }

    def _ending(self) -> str:
        """How it ended: who finished, who was lost, whether the server stopped."""
        lost = [c for c in self.roster if self.states[c].status == "lost"]
        who = (
            f"{', '.join(lost)} lost, the others finished"
            if lost
            else "every participant finished"
        )
        server = (
            "" if self.server_stopped is None else f"; the server stopped ({self.server_stopped})"
        )
        return f"finished: {who}{server}"

    def format(self) -> str:
        """Participants (one line each) and problems, for ``status``."""
        lines = []
        for client_id in self.roster:
            state = self.states.get(client_id)
            if state is None:
                lines.append(f"  {client_id:<20} joined (no lease record)")
                continue
            counts = state.counts
            seen = f"last seen {state.age:.0f} s ago"
            if counts is None:
                trials = "trials sealed to the server"
            else:
                total = sum(int(counts.get(k, 0)) for k in COUNT_KINDS)
                detail = ", ".join(f"{int(counts.get(k, 0))} {k}" for k in COUNT_KINDS)
                trials = f"{total} trials ({detail})"
            lines.append(f"  {client_id:<20} {state.status:<9} {trials}; {seen}")
        not_joined = self.n_clients - len(self.roster)
        if not_joined:
            lines.append(f"  ({not_joined} not joined yet)")
        out = ["lifecycle" + (f"      {self._ending()}" if self.ended else "")]
        out += lines
        for problem in self.problems:
            out.append(f"problem        {problem.text}")
        return "\n".join(out)


def server_age(server: dict[str, Any]) -> float:
    return max(time.time() - float(server.get("heartbeat", 0.0)), 0.0)


def fewest_published(federation: Federation) -> tuple[int, str]:
    """The fewest participants of whom the federation's server publishes a round, and the
    setting that fixes it (``(1, "")`` where any number will do).

    Without differential privacy an FTS-family server withholds a round of fewer than
    ``FTSConfig.min_contributors`` contributors; under secure aggregation it unmasks no sum of
    fewer than the threshold ``t``.
    """
    if federation.protocol.kind != "fts":
        return 1, ""
    secure = federation.secure_aggregation
    if secure is not None and secure.threshold is not None:
        return int(secure.threshold), "the secure aggregation's threshold t"
    if federation.privacy is None:
        return int(federation.fts.min_contributors), "FTSConfig.min_contributors"
    return 1, ""


def read_lifecycle(federation: Federation) -> Lifecycle:
    """The federation's participants and what keeps its rounds from closing."""
    roster = tuple(federation.participants())
    states = lease_book(federation).states()
    server = federation.store.server_status()
    n = federation.n_clients
    stopped = None if server is None else server.get("stopped")
    ended = Lifecycle(n, roster, states, ()).ended
    problems: list[Problem] = []
    serve_hint = f"`optuna-fedbo serve --storage URL --name {federation.name}`"
    if server is None:
        problems.append(
            Problem(
                "no-server",
                f"no server has been seen on federation {federation.name!r}: uploads wait in the "
                f"storage and no round is published until one runs ({serve_hint})",
            )
        )
    elif not ended:  # once every participant has ended, the server stopping is no problem
        age = server_age(server)
        interval = float(server.get("heartbeat_interval", 5.0))
        stale = max(SERVER_STALE_INTERVALS * interval, SERVER_STALE_MIN_SECONDS)
        finished = server.get(FINISHED_KEY)
        if isinstance(finished, dict):
            problems.append(Problem("finished", finished_message(federation, finished)))
        elif server.get("stopped"):
            problems.append(
                Problem(
                    "server-stopped",
                    f"the server stopped {age:.0f} s ago ({server.get('stopped')}); no round is "
                    f"published until it runs again ({serve_hint})",
                )
            )
        elif age > stale:
            problems.append(
                Problem(
                    "server-down",
                    f"the server was last seen {age:.0f} s ago (host {server.get('host')}, pid "
                    f"{server.get('pid')}): no round is published while it is down",
                )
            )
        else:
            closing = server.get("closing") or {}
            timeout = closing.get("round_timeout", "auto")
            min_uploads = int(closing.get("min_uploads", 1))
            fewest, setting = fewest_published(federation)
            needed = n if timeout is None else max(min_uploads, fewest)
            running = sum(1 for c in roster if c not in states or states[c].status == "active")
            if running < needed:
                if timeout is None:
                    rule = f"waits for all {n} participants (round_timeout None)"
                elif fewest > min_uploads:
                    rule = f"publishes no round of fewer than {needed} participants ({setting})"
                else:
                    rule = f"closes a round with at least {needed} uploads (min_uploads)"
                problems.append(
                    Problem(
                        "roster",
                        f"{len(roster)} of {n} participants have joined and {running} run; the "
                        f"server {rule}, so no round can close until more participants run "
                        "(start them, or create the federation with a smaller n_clients, or serve "
                        "with a smaller --min-uploads)",
                    )
                )
    return Lifecycle(n, roster, states, tuple(problems), None if stopped is None else str(stopped))


@dataclass(frozen=True)
class FederationSummary:
    """What a federation did, printed when ``serve`` ends.

    Attributes:
        name: Federation name.
        n_rounds: Rounds published.
        epsilon: Epsilon spent (``inf`` without differential privacy).
        delta: Its delta.
        participants: Lifecycle state by participant id.
        roster: Ids of the participants that joined, by index.
        n_clients: Registered participants ``N`` (those that never joined are named as missing).
    """

    name: str
    n_rounds: int
    epsilon: float
    delta: float
    participants: dict[str, ParticipantState]
    roster: tuple[str, ...]
    n_clients: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n_rounds": self.n_rounds,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "participants": {c: s.to_dict() for c, s in self.participants.items()},
        }

    def format(self) -> str:
        privacy = (
            "no differential privacy"
            if math.isinf(self.epsilon)
            else f"epsilon {self.epsilon:.4g} spent at delta {self.delta:.3g}"
        )
        lines = [
            f"federation {self.name}: {self.n_rounds} rounds published; {privacy}",
            f"{'participant':<20} {'status':<9} {'trials':>6} {'initial':>7} {'local':>6} "
            f"{'federated':>9}",
        ]
        for client_id in self.roster:
            state = self.participants.get(client_id)
            counts = {} if state is None or state.counts is None else state.counts
            values = [int(counts.get(k, 0)) for k in COUNT_KINDS]
            status = "joined" if state is None else state.status
            lines.append(
                f"{client_id:<20} {status:<9} {sum(values):>6} {values[0]:>7} {values[1]:>6} "
                f"{values[2]:>9}"
            )
        missing = [c for c in self.roster if c not in self.participants]
        not_joined = self.n_clients - len(self.roster)
        if missing or not_joined > 0:
            names = [repr(c) for c in missing] + [f"{not_joined} never joined"] * (not_joined > 0)
            lines.append(f"never started: {', '.join(names)} (of {self.n_clients} declared)")
        return "\n".join(lines)


def summarize(federation: Federation) -> FederationSummary:
    """The :class:`FederationSummary` of a federation now."""
    epsilon, delta = federation.privacy_spent()
    return FederationSummary(
        name=federation.name,
        n_rounds=federation.open_round(),
        epsilon=float(epsilon),
        delta=float(delta),
        participants=lease_book(federation).states(),
        roster=tuple(federation.participants()),
        n_clients=federation.n_clients,
    )


__all__ = ["FederationSummary", "Lifecycle", "Problem", "read_lifecycle", "summarize"]

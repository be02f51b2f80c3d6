"""The Fed-PNE server: closes phases, eliminates, expands and publishes the next phase.

``FederationServer(federation)`` returns a :class:`FedPNEServer` when the federation's protocol
is a :class:`~optuna_fedbo.federation.fedpne.config.FedPNEConfig`. One round ``r`` is one phase
``p = r + 1`` of Algorithm 2 (Algorithm 4 under DP; the server side is the same):

1. *collect*: read the open round's sealed uploads (node means; only the server can open them),
   verify, open, parse and check each one (configuration, participant, round and phase,
   exactly the nodes of ``K^p``, finite values: anything else is rejected, logged and left
   out);
2. *close*: when every one of the ``M`` participants has uploaded (the protocol is
   synchronous), or on ``force`` / timeout, hand the means to the core's
   :class:`~optuna_fedbo.core.fedpne.FedPNEServerState`: global means (line 12), best node
   (line 14), elimination (line 15), children of the survivors (line 16), and the size of the
   next phase (lines 5-8);
3. *persist, then publish*: write the new server state to the server's private study, stage the
   broadcast (next phase, best node), open the next round's uploads, complete the broadcast and
   move the ``latest`` pointer, and discard the closed round's raw uploads.

Storage layout (in addition to :mod:`optuna_fedbo.federation.store`'s): the study
``NAME:fedbo:fedpne:server`` holds one system attribute ``state:RRRRRR`` per round: the core's
state (history with the global means, the open phase) at the opening of round ``R``, sealed to
the server's own key and signed: written and read by the server only (a state that does not
verify stops the server). Raw uploads stay in the per-round uploads studies
until their phase is published, so a server restarted at any point rebuilds the open phase
from the newest state and re-reads every node mean already uploaded; a crash between writing
the state and publishing is finished on restart (the decision is never taken twice).

Timeout and force policy. The paper waits for all ``M`` participants (``round_timeout=None``;
``optuna-fedbo status`` lists who is missing). By default (``round_timeout="auto"``, see
:class:`~optuna_fedbo.federation.server.FederationServer`) a phase also closes, once at least
``min_uploads`` (half of ``M``) uploaded, three times the slowest running participant's phase
duration (its pulls times its typical trial duration) after the first valid upload, so that a
crashed participant cannot stall the others; a number closes it that many seconds after the
first valid upload (as seen by this server process). ``step(force=True)`` closes it at once with
whoever uploaded. A forced close averages over the ``M'`` reporters and uses
``T_{h,i} = M' t`` in the widths ``b``: it estimates the reporters' average objective, not the
federation's (a documented departure from the paper). Participants left out abandon their
remaining pulls of that phase and continue with the next one; a late upload to a closed round
is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import time
from typing import Any

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.study import StudyDirection
from optuna.trial import TrialState

from optuna_fedbo.core.fedpne import FedPNEServerState
from optuna_fedbo.core.fedpne import Phase
from optuna_fedbo.core.fedpne import PhaseReport
from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._uploads import UploadCollector
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fedpne.channel import FedPNEChannel
from optuna_fedbo.federation.fedpne.messages import encode_phase_broadcast
from optuna_fedbo.federation.fedpne.messages import parse_means_upload
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import text_of
from optuna_fedbo.federation.trust import UntrustedRecordError

_logger = optuna.logging.get_logger(__name__)

STATE_PREFIX = "state:"

#: Prefix of the placeholder ids that stand for participants that have not joined yet (not
#: printable, so never a valid participant id).
_NOT_JOINED = "\x00not-joined-"


@dataclass(frozen=True)
class PhaseRoundReport(RoundReport):
    """What the server did when it closed a Fed-PNE phase (a :class:`RoundReport`).

    Attributes:
        phase_report: The core's report of the closed phase (global means, widths, best node,
            eliminated nodes, survivors, contributors); server-side information.
        next_phase: The phase published for the participants.
    """

    phase_report: PhaseReport
    next_phase: Phase

    @property
    def final(self) -> bool:
        """Whether the published phase is the final one (no more rounds)."""
        return self.next_phase.final


class ServerStateStore:
    """The Fed-PNE server's private study: one saved core state per round.

    Args:
        store: The federation's store.
    """

    def __init__(self, store: FederationStore) -> None:
        self._store = store
        self.storage = store.storage
        self.study_name = f"{store.name}:fedbo:fedpne:server"
        self._study_id: int | None = None

    def _id(self) -> int:
        if self._study_id is None:
            try:
                self._study_id = self.storage.create_new_study(
                    [StudyDirection.MINIMIZE], self.study_name
                )
            except DuplicatedStudyError:
                self._study_id = self.storage.get_study_id_from_name(self.study_name)
        return self._study_id

    def rounds(self) -> dict[int, str]:
        """Round -> the saved state (JSON) at its opening.

        The states hold the global node means, which only the server may read: they are sealed
        to the server's own key and signed.

        Raises:
            UntrustedRecordError: If a saved state does not verify (the server fails closed).
        """
        attrs = self.storage.get_study_system_attrs(self._id())
        trust = self._store.trust
        assert trust is not None
        states = {}
        for key, value in attrs.items():
            if not key.startswith(STATE_PREFIX):
                continue
            try:
                states[int(key[len(STATE_PREFIX) :])] = trust.open_private(key, value)
            except UntrustedRecordError as error:
                raise UntrustedRecordError(
                    f"The saved Fed-PNE server state {key!r} of federation "
                    f"{self._store.name!r} does not verify ({error}): the server refuses to go "
                    "on. Restore the study from a backup, or create a new federation."
                ) from None
        return states

    def write(self, round_index: int, state: dict[str, Any]) -> None:
        """Save the state at the opening of ``round_index`` (idempotent), sealed and signed."""
        key = f"{STATE_PREFIX}{round_index:06d}"
        trust = self._store.trust
        assert trust is not None
        self.storage.set_study_system_attr(
            self._id(), key, trust.seal_private(key, canonical_json(state))
        )


@dataclass
class _Pending:
    round: int
    state: dict[str, Any]
    trial_id: int
    reason: str
    rejected: tuple[tuple[str, str], ...]


class FedPNEServer(FederationServer):
    """The Fed-PNE / DP-Fed-PNE server (Algorithm 2 / 4) over a federation's storage.

    Created by ``FederationServer(federation, ...)`` for a Fed-PNE federation; the arguments
    are the same.

    Args:
        federation: The federation (protocol :class:`~optuna_fedbo.federation.FedPNEConfig`).
        round_timeout: ``"auto"`` (default; see the module docstring), seconds after a phase's
            first valid upload after which it is closed with the participants that uploaded,
            or ``None``: wait for all ``M``, as the paper.
        min_uploads: Fewest valid uploads with which a timeout closes a phase (``"auto"``:
            half of ``M``, rounded up).
        discard_uploads: Delete a round's raw uploads once it is published.
        heartbeat_interval: Seconds between the server's heartbeat writes.
    """

    def __init__(
        self,
        federation: Federation,
        *,
        round_timeout: float | str | None = "auto",
        min_uploads: int | str = "auto",
        discard_uploads: bool = True,
        heartbeat_interval: float = 5.0,
    ) -> None:
        channel = FedPNEChannel(federation)
        self._start(
            federation,
            round_timeout=round_timeout,
            min_uploads=min_uploads,
            discard_uploads=discard_uploads,
            heartbeat_interval=heartbeat_interval,
        )
        self.channel = channel
        self._states = ServerStateStore(federation.store)
        self._uploads: UploadCollector[dict[str, float]] = UploadCollector(
            self._open_upload_with_receipt
        )
        self._open = 0
        self._state: dict[str, Any] = {}
        self._pending: _Pending | None = None
        self._recover()

    # ------------------------------------------------------------------------ recovery
    def _initial_state(self) -> dict[str, Any]:
        state = FedPNEServerState(
            self.channel.params, self.channel.partition, self._client_ids()
        ).to_dict()
        state["submissions"] = {}
        return state

    def _recover(self) -> None:
        """Rebuild the server's state from storage (after a restart or an error)."""
        broadcasts = self._store.broadcasts()
        published = [b for b in broadcasts if b.state == TrialState.COMPLETE]
        last = max((b.round for b in published), default=-1)
        latest = self._store.latest()
        if published and (latest is None or "scanned" in latest or int(latest["round"]) < last):
            newest = max(published, key=lambda b: b.round)
            self._store.commit_broadcast(newest.trial_id, last, int(newest.value or 0))
        saved = self._states.rounds()
        if not saved:
            if last >= 0:
                raise ValueError(
                    f"Federation {self.federation.name!r} has published rounds but no saved "
                    f"Fed-PNE server state (study {self._states.study_name!r} is missing)."
                )
            self._states.write(0, self._initial_state())
            saved = self._states.rounds()
        newest_saved = max(saved)
        self._pending = None
        if newest_saved == last + 1:
            open_round = last + 1
        elif newest_saved == last + 2:
            open_round = last + 1
            state = json.loads(saved[newest_saved])
            staged = [
                b for b in broadcasts if b.state == TrialState.RUNNING and b.round == open_round
            ]
            trial_id = (
                staged[0].trial_id
                if staged
                else self._stage(open_round, self._payload(open_round, state))
            )
            self._pending = _Pending(open_round, state, trial_id, "resumed", ())
        else:
            raise ValueError(
                f"Federation {self.federation.name!r}: the newest saved server state is for "
                f"round {newest_saved} but round {last} is the newest published; the storage "
                "was modified by hand."
            )
        for broadcast in broadcasts:
            if broadcast.state != TrialState.RUNNING:
                continue
            if self._pending is not None and broadcast.trial_id == self._pending.trial_id:
                continue
            _logger.warning(f"Purging a stale staged broadcast of round {broadcast.round}.")
            self._store.purge_broadcast(broadcast.trial_id)
        self._open = open_round
        self._state = json.loads(saved[open_round])
        if last >= 0 and self._discard:
            self._store.discard_uploads(last)
        self._store.open_uploads(open_round)
        self._reset_round()

    def _reset_round(self) -> None:
        self._uploads.reset()

    # ----------------------------------------------------------------------- the state
    @property
    def open_round(self) -> int:
        """The round currently collecting uploads (phase ``open_round + 1``)."""
        return self._open

    @property
    def phase(self) -> Phase:
        """The open phase."""
        return Phase.from_dict(self._state["phase"])

    @property
    def finished(self) -> bool:
        """Whether the final phase has been published (nothing more to collect)."""
        return self._pending is None and self.phase.final

    def _work_per_round(self) -> int:
        return max(self.phase.budget, 1)

    def state(self) -> FedPNEServerState:
        """The core's state of the open phase, with the valid uploads that arrived so far."""
        with self._lock:
            uploads, _ = self._collect(self._open, self.phase)
            return self._core(uploads)

    def _client_ids(self) -> list[str]:
        roster = self.federation.participants()
        missing = self.federation.n_clients - len(roster)
        return roster + [f"{_NOT_JOINED}{k}" for k in range(missing)]

    def _core(self, uploads: dict[str, dict[str, float]]) -> FedPNEServerState:
        record = dict(self._state)
        record["client_ids"] = self._client_ids()
        record["submissions"] = uploads
        return FedPNEServerState.from_dict(record)

    # ----------------------------------------------------------------------- the round
    def step(self, force: bool = False) -> PhaseRoundReport | None:
        """Close the open phase if it is ready, then publish the next one.

        A phase is ready when all ``M`` participants have a valid upload in it, or when
        ``round_timeout`` has passed since its first valid upload (with at least
        ``min_uploads``), or when ``force`` is true (with at least one). The final phase has no
        uploads and is never closed.

        Args:
            force: Close the phase with whatever valid uploads arrived.

        Returns:
            The report of the published round, or ``None`` if nothing was published.
        """
        with self._lock:
            self._ensure_current()
            self._heartbeat()
            if self._pending is not None:
                return self._publish()
            if self.finished:
                return None
            round_index = self._open
            self._keep_uploads_open(round_index)
            uploads, rejected = self._collect(round_index, self.phase)
            reason = self._closing_reason(uploads, force)
            if reason is None:
                return None
            core = self._core(uploads)
            core.close_phase(force=reason != "complete")
            state = core.to_dict()
            # Persist the decision before anything is published: a restart finishes it.
            self._ensure_current()  # again: only the newest server decides and publishes
            self._states.write(round_index + 1, state)
            trial_id = self._stage(round_index, self._payload(round_index, state))
            self._pending = _Pending(round_index, state, trial_id, reason, rejected)
            return self._publish()

    def _collect(
        self, round_index: int, phase: Phase
    ) -> tuple[dict[str, dict[str, float]], tuple[tuple[str, str], ...]]:
        def parse(client_id: str, plaintext: bytes, receipt: str) -> dict[str, float]:
            return parse_means_upload(
                text_of(plaintext),
                client_id=client_id,
                round_index=round_index,
                config_hash=self.federation.config_hash,
                phase=phase,
            )

        return self._uploads.collect(
            self._store.read_uploads(round_index), round_index, parse, f" (phase {phase.index})"
        )

    def _closing_reason(self, uploads: dict[str, dict[str, float]], force: bool) -> str | None:
        if not uploads:
            return None
        if len(uploads) >= self.federation.n_clients:
            return "complete"
        if force:
            return "forced"
        if len(uploads) >= self._min_uploads and self._uploads.waited(
            self.current_round_timeout()
        ):
            return "timeout"
        return None

    def _stage(self, round_index: int, payload: str) -> int:
        """Sign and stage a broadcast (with the receipts of the phase's valid uploads)."""
        signed = self._store.sign_broadcast(
            round_index,
            payload,
            epoch=self._epoch,
            receipts=tuple(self._uploads.receipts.values()),
        )
        return self._store.stage_broadcast(round_index, signed)

    def _payload(self, round_index: int, state: dict[str, Any]) -> str:
        """The broadcast of ``round_index`` from the state saved after closing it."""
        core = FedPNEServerState.from_dict({**state, "submissions": {}})
        report = core.history[-1]
        if report.phase.index != round_index + 1:
            raise ValueError(
                f"The saved state after round {round_index} closes phase {report.phase.index}."
            )
        return encode_phase_broadcast(
            round_index=round_index,
            closed_phase=report.phase.index,
            best=report.best,
            eliminated=report.eliminated,
            n_contributors=len(report.contributors),
            forced=report.forced,
            next_phase=core.current_phase(),
            communication=core.communication(),
            config_hash=self.federation.config_hash,
        )

    def _publish(self) -> PhaseRoundReport:
        pending = self._pending
        assert pending is not None
        core = FedPNEServerState.from_dict({**pending.state, "submissions": {}})
        report = core.history[-1]
        self._ensure_current()  # again before the release is committed
        self._store.open_uploads(pending.round + 1)
        self._store.commit_broadcast(pending.trial_id, pending.round, len(report.contributors))
        self._open = pending.round + 1
        self._state = pending.state
        self._pending = None
        if self._discard:
            self._store.discard_uploads(pending.round)
        self._reset_round()
        self._heartbeat(force=True)
        next_phase = core.current_phase()
        _logger.info(
            f"Fed-PNE {self.federation.name!r}: closed phase {report.phase.index} "
            f"({len(report.contributors)} contributors, {pending.reason}; "
            f"{len(report.eliminated)} of {len(report.phase.nodes)} nodes eliminated, best "
            f"{report.best.key}); published phase {next_phase.index} with "
            f"{len(next_phase.nodes)} nodes, t = {next_phase.pulls_per_node}"
            + (" (final)" if next_phase.final else "")
            + "."
        )
        return PhaseRoundReport(
            round=pending.round,
            n_contributors=len(report.contributors),
            contributors=tuple(report.contributors),
            rejected=pending.rejected,
            reason=pending.reason,
            published_at=time.time(),
            phase_report=report,
            next_phase=next_phase,
        )

    # ------------------------------------------------------------------------ serving
    def _serving(self) -> str:
        return (
            f"Serving Fed-PNE federation {self.federation.name!r} from phase {self.phase.index}."
        )

    def _serve_done(self) -> bool:
        return self.finished  # the final phase

    def _served(self) -> None:
        if self.finished:
            _logger.info(
                f"Fed-PNE federation {self.federation.name!r} reached its horizon: phase "
                f"{self.phase.index} is final."
            )


__all__ = ["FedPNEServer", "PhaseRoundReport", "ServerStateStore"]

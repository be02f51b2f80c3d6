"""A Fed-PNE site's phase, read from its study: which pulls are done, which are taken.

A Fed-PNE participant is a site (its ``client_id`` and one Optuna study) run by any number of
workers (threads, processes, hosts). None of them keeps the phase in memory; each reads it from
the study's trials:

* **Done pulls.** A trial of the phase whose reward is known: complete with a value, or
  carrying :data:`REWARD_ATTR` (written in ``after_trial``, before Optuna stores the trial as
  complete, and kept if the worker dies right after). A slot done twice counts its first trial
  (by number), so every worker computes the same node means.
* **Taken pulls.** A running trial claims its slot with :data:`CLAIM_ATTR`. Two workers may
  pick the same free slot at once; the claim (the slot, then its ticket) settles it as Lamport's
  bakery does (:mod:`._bakery`): each slot is pulled by one trial at a time, and the smallest
  ticket always keeps it (no slot skipped).

A running trial of a dead worker keeps its slot until the site's takeover fails the trial
(:mod:`optuna_fedbo.samplers._site_state`); a failed or pruned pull frees its slot.
"""

from __future__ import annotations

from collections.abc import Callable
import math
from typing import Any

from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from optuna_fedbo.core.fedpne import Phase
from optuna_fedbo.samplers._bakery import keeps_choice

#: Trial system attributes of a pull: the configuration it belongs to, its phase, slot, node.
CONFIG_ATTR = "fedpne:config"
PHASE_ATTR = "fedpne:phase"
SLOT_ATTR = "fedpne:slot"
NODE_ATTR = "fedpne:node"
#: Trial system attribute: the reward of a finished pull.
REWARD_ATTR = "fedpne:reward"
#: Trial system attribute: ``{"config", "phase", "slot", "ticket"}``, a running trial's claim.
CLAIM_ATTR = "fedpne:claim"


class PhaseSlots:
    """The pulls of a site's phases, as its study records them (thread-safe: no state).

    Args:
        tag: The federation's configuration tag (trials of another configuration are ignored).
        reward: ``(value, direction) -> (reward, clipped)`` of the federation's configuration.
        ticket: Draws the next ticket (increasing across all the site's workers).
        poll_interval: Seconds between reads while waiting for a rival's ticket.
    """

    def __init__(
        self,
        tag: str,
        reward: Callable[[float, Any], tuple[float, bool]],
        ticket: Callable[[], int],
        poll_interval: float = 0.02,
    ) -> None:
        self._tag = tag
        self._reward = reward
        self._ticket = ticket
        self._poll = poll_interval

    # ----------------------------------------------------------------------- reading
    def done(self, study: Study, phase: Phase) -> dict[int, float]:
        """The reward of every done pull of ``phase`` in the study, by slot."""
        return self._done(study, _read(study), phase)

    def _done(self, study: Study, trials: list[FrozenTrial], phase: Phase) -> dict[int, float]:
        schedule = phase.schedule()
        done: dict[int, float] = {}
        for t in sorted(trials, key=lambda t: t.number):
            attrs = t.system_attrs
            if attrs.get(CONFIG_ATTR) != self._tag or attrs.get(PHASE_ATTR) != phase.index:
                continue
            slot = attrs.get(SLOT_ATTR)
            if not isinstance(slot, int) or not 0 <= slot < phase.budget or slot in done:
                continue
            if attrs.get(NODE_ATTR) != schedule[slot].key:
                continue
            reward = attrs.get(REWARD_ATTR)
            if t.state == TrialState.COMPLETE and t.value is not None:
                done[slot] = self._reward(t.value, study.direction)[0]
            elif (
                isinstance(reward, (int, float))
                and not isinstance(reward, bool)
                and math.isfinite(reward)
            ):
                done[slot] = float(reward)
        return done

    def _rivals(self, trials: list[FrozenTrial], phase: Phase, own: int) -> dict[int, list]:
        """The tickets (``None``: not drawn yet) of the other running trials' claims, by slot."""
        claims: dict[int, list] = {}
        for t in trials:
            claim = t.system_attrs.get(CLAIM_ATTR)
            if t._trial_id == own or t.state != TrialState.RUNNING or not isinstance(claim, dict):
                continue
            if claim.get("config") != self._tag or claim.get("phase") != phase.index:
                continue
            slot, ticket = claim.get("slot"), claim.get("ticket")
            if isinstance(slot, int) and (ticket is None or isinstance(ticket, int)):
                claims.setdefault(slot, []).append(ticket)
        return claims

    # ----------------------------------------------------------------------- claiming
    def claim(self, study: Study, trial: FrozenTrial, phase: Phase) -> tuple[int | None, int]:
        """Claim a free slot of ``phase`` for ``trial``.

        Returns:
            ``(slot, n_done)``: the slot won (``None`` if every slot is done or taken; the
            trial's claim is then withdrawn) and the number of done pulls last read.
        """
        own, claimed = trial._trial_id, False
        while True:
            trials = _read(study)
            done = self._done(study, trials, phase)
            rivals = self._rivals(trials, phase, own)
            free = [k for k in range(phase.budget) if k not in done and k not in rivals]
            if not free:
                if claimed:  # withdrawn: a rival's claim won
                    self._write(study, own, None)
                return None, len(done)
            slot, claimed = free[0], True
            claim = {"config": self._tag, "phase": phase.index, "slot": slot, "ticket": None}
            self._write(study, own, claim)
            ticket = self._ticket()
            self._write(study, own, {**claim, "ticket": ticket})
            if self._won(study, phase, slot, ticket, own):
                return slot, len(done)

    def _won(self, study: Study, phase: Phase, slot: int, ticket: int, own: int) -> bool:
        def rival_tickets() -> list[int | None] | None:
            trials = _read(study)
            if slot in self._done(study, trials, phase):
                return None
            return self._rivals(trials, phase, own).get(slot, [])

        return keeps_choice(rival_tickets, ticket, self._poll)

    @staticmethod
    def _write(study: Study, trial_id: int, claim: dict[str, Any] | None) -> None:
        study._storage.set_trial_system_attr(trial_id, CLAIM_ATTR, claim)


def _read(study: Study) -> list[FrozenTrial]:
    return study._get_trials(deepcopy=False, use_cache=False)


__all__ = [
    "CLAIM_ATTR",
    "CONFIG_ATTR",
    "NODE_ATTR",
    "PHASE_ATTR",
    "PhaseSlots",
    "REWARD_ATTR",
    "SLOT_ATTR",
]

"""Which step of secure aggregation the open round is in, and who is missing (``status``).

Read from the storage alone (anyone with the URL can: the records are signed, not secret): the
newest attempt's server records say which step it collects, and the participants' message keys
say who has answered it.
"""

from __future__ import annotations

from typing import Any

from optuna_fedbo.federation.secagg.relay import INPUTS_STEP
from optuna_fedbo.federation.secagg.relay import parse_key
from optuna_fedbo.federation.secagg.relay import Relay
from optuna_fedbo.federation.trust import UntrustedRecordError

#: What each step is, for people.
STEP_NAMES = {
    "keys": "advertising keys",
    "shares": "sharing keys",
    "masked": "sending masked inputs",
    "consistency": "signing the survivor list",
    "unmask": "revealing shares",
}


def _content(trust: Any, kind: str, text: Any) -> dict[str, Any] | None:
    try:
        return trust.verify(f"secagg-{kind}", text)
    except UntrustedRecordError:
        return None


def secagg_status(federation: Any) -> dict[str, Any]:
    """``{"round", "attempt", "step", "missing", "answered", "taking_part", "failed"}`` of the
    open round (``attempt`` ``None`` and ``step`` ``"setup"`` before the server has started it;
    ``taking_part``: who advertised keys in the attempt, the ``uploaded`` of ``status``)."""
    round_index = federation.open_round()
    relay = Relay(federation.store)
    entries = relay.entries(round_index, messages=True)
    parsed = [p for p in map(parse_key, entries) if p is not None]
    setups = [a for a, kind, _ in parsed if kind == "setup"]
    status: dict[str, Any] = {
        "round": round_index,
        "attempt": None,
        "step": "setup",
        "missing": [],
        "answered": [],
        "taking_part": [],
        "failed": None,
    }
    if not setups:
        return status
    attempt = max(setups)
    kinds = {kind for a, kind, _ in parsed if a == attempt}
    trust = federation.trust
    setup = _content(trust, "setup", entries[f"secagg:{attempt}:setup"]) or {}
    expected = list(setup.get("setup", {}).get("participants", []))
    step = "keys"
    if "keys" in kinds:
        directory = _content(trust, "keys", entries[f"secagg:{attempt}:keys"]) or {}
        adverts = directory.get("message", {}).get("adverts", [])
        expected, step = [a.get("sender") for a in adverts], "shares"
    if "bundles" in kinds:
        index = _content(trust, "bundles", entries[f"secagg:{attempt}:bundles"]) or {}
        expected, step = sorted(index.get("trials", {})), "masked"
    for kind, after in (("survivors", "consistency"), ("unmask", "unmask")):
        if kind in kinds:
            record = _content(trust, kind, entries[f"secagg:{attempt}:{kind}"]) or {}
            expected, step = list(record.get("message", {}).get("survivors", [])), after
    if step == INPUTS_STEP:  # who sent a masked input: read the (large) inputs study too
        entries = relay.entries(round_index, inputs=True)
        parsed = [p for p in map(parse_key, entries) if p is not None]
    answered = sorted(
        str(c) for a, kind, c in parsed if a == attempt and kind == f"msg:{step}" and c
    )
    status.update(
        taking_part=sorted(str(c) for a, kind, c in parsed if a == attempt and kind == "msg:keys"),
        attempt=attempt,
        step=step,
        answered=answered,
        missing=[c for c in expected if c not in answered],
    )
    if "failed" in kinds:
        failed = _content(trust, "failed", entries[f"secagg:{attempt}:failed"]) or {}
        status.update(step="failed", missing=[], failed=failed.get("reason"))
    return status


def format_secagg(status: dict[str, Any]) -> str:
    """The ``status`` line of :func:`secagg_status`."""
    where = f"round {status['round']}"
    if status["attempt"] is None:
        return f"secure agg.    {where}: waiting for the server to start it"
    where += f" attempt {status['attempt']}"
    if status["failed"]:
        return f"secure agg.    {where}: failed ({status['failed']}); it starts over"
    missing = ", ".join(status["missing"]) or "-"
    return (
        f"secure agg.    {where}: {STEP_NAMES[status['step']]}; "
        f"{len(status['answered'])} answered, missing {missing}"
    )


__all__ = ["STEP_NAMES", "format_secagg", "secagg_status"]

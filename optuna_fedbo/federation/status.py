"""What ``optuna-fedbo status`` shows of a federation: :class:`FederationStatus`."""

from __future__ import annotations

from dataclasses import dataclass
import time
from typing import Any

from optuna_fedbo.federation.secagg.status import format_secagg


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
        secure_aggregation: With secure aggregation, the open round's step and who is missing
            (:func:`~optuna_fedbo.federation.secagg.status.secagg_status`).
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
    secure_aggregation: dict[str, Any] | None = None

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
            "secure_aggregation": self.secure_aggregation,
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
        if self.secure_aggregation is not None:
            lines.append(format_secagg(self.secure_aggregation))
        if self.privacy is not None:
            lines += format_privacy(self.privacy)
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


def format_privacy(summary: dict[str, Any]) -> list[str]:
    """The lines of ``status`` about privacy, from :meth:`PrivacyLedger.summary`."""
    budget = summary["epsilon_budget"]
    spent = f"epsilon {summary['epsilon']:.4g}"
    if budget is not None:
        spent += f" of budget {budget:g}"
    sampling = (  # distributed DP under secure aggregation samples no one (see its config)
        "no subsampling"
        if summary["sampling"] == "none"
        else f"q {summary['sample_rate']:g}, {summary['sampling']} sampling"
    )
    lines = [
        f"privacy        {spent}, delta {summary['delta']:.3g} after "
        f"{summary['rounds_accounted']} accounted round(s) ({summary['accountant']} accountant)",
        f"mechanism      {summary['mechanism'].replace('_', ' ')}: z "
        f"{summary['noise_multiplier']:g}, S {summary['clip_norm']:g}, {sampling} "
        f"({summary['neighbouring_relation']})",
    ]
    if summary.get("unverified_entries") or summary.get("ledger", "ok") != "ok":
        lines.append(  # never "epsilon 0" for a ledger deleted or rolled back: what is proven
            f"ledger         {summary['ledger']}: {summary['ledger_releases']} of "
            f"{summary['rounds_accounted']} releases, {summary['unverified_entries']} entries not "
            "verifying (ignored); the storage was tampered with: the server refuses to publish"
        )
    exhausted = summary["budget_exhausted"]
    if exhausted is not None:
        lines.append(
            f"budget         exhausted: round {exhausted['round']} not published (epsilon "
            f"would reach {exhausted['epsilon_next']:.4g}); participants use local TS"
        )
    return lines


__all__ = ["FederationStatus", "format_privacy", "format_server"]

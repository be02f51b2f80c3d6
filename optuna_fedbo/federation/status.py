"""What ``optuna-fedbo status`` shows of a federation: :class:`FederationStatus`."""

from __future__ import annotations

from dataclasses import dataclass
import time
from typing import Any

from optuna_fedbo.federation.ledger import format_summary


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


__all__ = ["FederationStatus", "format_server"]

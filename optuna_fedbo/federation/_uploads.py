"""How both servers read a round's raw uploads: parse each once, reject and log bad ones once."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
import hashlib
import time
from typing import Generic
from typing import TypeVar

import optuna

_logger = optuna.logging.get_logger(__name__)


class UploadRejected(ValueError):
    """An upload the server must not aggregate or use; the message says why."""


Parsed = TypeVar("Parsed")


class UploadCollector(Generic[Parsed]):
    """Parses the open round's uploads, caching by text, and remembers when the first arrived.

    Args:
        is_participant: Whether an id is in the federation's roster.
    """

    def __init__(self, is_participant: Callable[[str], bool]) -> None:
        self._is_participant = is_participant
        self._parsed: dict[str, tuple[str, Parsed | UploadRejected]] = {}
        self._logged: set[tuple[int, str, str]] = set()
        #: Monotonic time at which the open round's first valid upload was seen.
        self.first_seen: float | None = None

    def reset(self) -> None:
        """Forget the open round (call when a new round opens or state is reloaded)."""
        self._parsed.clear()
        self.first_seen = None

    def waited(self, timeout: float | None) -> bool:
        """Whether ``timeout`` seconds have passed since the round's first valid upload."""
        return (
            timeout is not None
            and self.first_seen is not None
            and time.monotonic() - self.first_seen >= timeout
        )

    def collect(
        self,
        raw: Mapping[str, str],
        round_index: int,
        parse: Callable[[str, str], Parsed],
        where: str = "",
    ) -> tuple[dict[str, Parsed], tuple[tuple[str, str], ...]]:
        """Parse ``raw`` (participant id -> stored text) into valid uploads and rejections.

        Args:
            raw: The round's raw uploads.
            round_index: The round (for messages).
            parse: ``(client_id, text) -> parsed upload``; raises :class:`UploadRejected`.
            where: Extra context for the rejection warning (e.g. the phase).

        Returns:
            ``(valid uploads by participant id, (participant id, reason) of each rejection)``.
        """
        valid: dict[str, Parsed] = {}
        rejected: list[tuple[str, str]] = []
        for client_id, text in sorted(raw.items()):
            cached = self._parsed.get(client_id)
            if cached is not None and cached[0] == text:
                outcome = cached[1]
            else:
                try:
                    if not self._is_participant(client_id):
                        raise UploadRejected("unknown participant (not in the roster)")
                    outcome = parse(client_id, text)
                except UploadRejected as error:
                    outcome = error
                self._parsed[client_id] = (text, outcome)
            if not isinstance(outcome, UploadRejected):
                valid[client_id] = outcome
                continue
            rejected.append((client_id, str(outcome)))
            key = (round_index, client_id, hashlib.sha256(str(text).encode()).hexdigest())
            if key not in self._logged:
                self._logged.add(key)
                _logger.warning(
                    f"Rejected the upload of {client_id!r} in round {round_index}{where}: "
                    f"{outcome}."
                )
        if valid and self.first_seen is None:
            self.first_seen = time.monotonic()
        return valid, tuple(rejected)

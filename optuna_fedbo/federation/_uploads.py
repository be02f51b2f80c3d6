"""How every server reads a round's sealed uploads: open and parse each once, reject and log bad
ones once (with the reason), and remember the receipts of the good ones."""

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
    """Opens and parses the open round's uploads, caching by text; remembers when the first
    valid one arrived, the newest counter of each participant, and receipts.

    Args:
        open_upload: ``(client_id, stored text, round) -> (counter, plaintext, receipt)``:
            checks the participant's enrollment, the size bound, the signature and the
            binding, and decrypts (the plaintext as bytes); the receipt is
            :func:`~optuna_fedbo.federation.trust.upload_receipt`'s, what the participant
            computed of what it sent; raises :class:`UploadRejected`.
    """

    def __init__(self, open_upload: Callable[[str, str, int], tuple[int, bytes, str]]) -> None:
        self._open = open_upload
        # Each participant's last stored text, what it parsed to and its receipt (of a refused
        # text: its digest, to log it once): a server polls the open round many times, and a
        # pooled upload is several hundred kilobytes to open and parse.
        self._parsed: dict[str, tuple[str, Parsed | UploadRejected, str]] = {}
        self._logged: set[tuple[int, str, str]] = set()
        self._counters: dict[str, int] = {}
        #: Monotonic time at which the open round's first valid upload was seen.
        self.first_seen: float | None = None
        #: Receipt (:func:`~optuna_fedbo.federation.trust.upload_receipt`) of each valid upload
        #: of the open round.
        self.receipts: dict[str, str] = {}

    def reset(self) -> None:
        """Forget the open round (call when a new round opens or state is reloaded)."""
        self._parsed.clear()
        self._counters.clear()
        self.receipts.clear()
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
        parse: Callable[[str, bytes, str], Parsed],
        where: str = "",
    ) -> tuple[dict[str, Parsed], tuple[tuple[str, str], ...]]:
        """Parse ``raw`` (participant id -> stored text) into valid uploads and rejections.

        Args:
            raw: The round's raw uploads.
            round_index: The round (for messages).
            parse: ``(client_id, plaintext, receipt) -> parsed upload``; raises
                :class:`UploadRejected`.
            where: Extra context for the rejection warning (e.g. the phase).

        Returns:
            ``(valid uploads by participant id, (participant id, reason) of each rejection)``.
        """
        valid: dict[str, Parsed] = {}
        rejected: list[tuple[str, str]] = []
        for client_id, text in sorted(raw.items()):
            cached = self._parsed.get(client_id)
            if cached is not None and cached[0] == text:
                outcome, receipt = cached[1], cached[2]
            else:
                try:
                    counter, plaintext, receipt = self._open(client_id, text, round_index)
                    newest = self._counters.get(client_id)
                    if newest is not None and counter < newest:
                        raise UploadRejected(
                            f"replayed (counter {counter} is older than {newest}, already seen)"
                        )
                    outcome = parse(client_id, plaintext, receipt)
                    self._counters[client_id] = counter
                except UploadRejected as error:
                    outcome = error
                    receipt = hashlib.sha256(str(text).encode()).hexdigest()
                self._parsed[client_id] = (text, outcome, receipt)
            if not isinstance(outcome, UploadRejected):
                valid[client_id] = outcome
                self.receipts[client_id] = receipt
                continue
            self.receipts.pop(client_id, None)
            rejected.append((client_id, str(outcome)))
            key = (round_index, client_id, receipt)
            if key not in self._logged:
                self._logged.add(key)
                _logger.warning(
                    f"Rejected the upload of {client_id!r} in round {round_index}{where}: "
                    f"{outcome}."
                )
        for gone in set(self.receipts) - set(raw):  # deleted from the storage: not received
            del self.receipts[gone]
        if valid and self.first_seen is None:
            self.first_seen = time.monotonic()
        return valid, tuple(rejected)

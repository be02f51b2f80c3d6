"""Through the untrusted relay: sealed, signed uploads out and verified broadcasts in.

A participant seals each upload to the server, signs it and binds it to the opening of its round
(:mod:`._openings`); it remembers a receipt of each upload and checks, when the round's
broadcast arrives, that the server received it in time (re-sending it to the open round if not).
"""

from __future__ import annotations

import threading
from typing import Any

import optuna

from optuna_fedbo.federation._openings import opening_for
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.config import FederationConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.secagg.config import no_single_upload
from optuna_fedbo.federation.site_counter import UploadSender
from optuna_fedbo.federation.store import FederationStore
from optuna_fedbo.federation.trust import text_of
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.watermark import check_participant

_logger = optuna.logging.get_logger(__name__)


class Relay:
    """Uploads and broadcasts of :class:`~optuna_fedbo.federation.Federation` (a base class of
    it, whose state and membership it uses)."""

    _store: FederationStore
    _trust: Trust
    _lock: threading.Lock
    _privacy: DPConfig | None
    _sender: UploadSender
    _sent: dict[str, tuple[int, str, Any]]
    _config: FederationConfig
    name: str

    def send_upload(
        self,
        client_id: str,
        round_index: int,
        payload: str | bytes,
        resend: Any = None,
    ) -> str:
        """Seal ``payload`` to the server, sign it as ``client_id`` and write it to the round.

        Args:
            client_id: The participant (enrolled, with its key on this machine).
            round_index: The open round (the upload is bound to its opening).
            payload: The protocol's upload message (text, or a binary frame).
            resend: ``() -> None`` that sends the upload again to the open round, called if
                the broadcast of ``round_index`` shows that the upload missed it (arrived after
                the server closed the round); ``None``: only warn.

        Returns:
            The upload's receipt (:func:`~optuna_fedbo.federation.trust.upload_receipt`): what
            the round's broadcast lists if the server received the upload in time.

        Raises:
            ValueError: If the participant cannot sign, the sealed upload is over the bound, or
                the round is not open yet.
            LedgerRollbackError: If the federation went backwards (a rolled-back storage).
            KeyError: If the round is closed (its uploads study is gone).
        """
        key = self._participant_key(client_id)
        if self._privacy is not None:
            check_participant(self)  # never into a federation that went backwards
        opening = opening_for(self._store, round_index)
        receipt = self._sender.send(key, round_index, payload, opening)[1]  # :mod:`.site_counter`
        with self._lock:
            self._sent[client_id] = (round_index, receipt, resend)
        return receipt

    def has_sent(self, client_id: str, round_index: int) -> bool:
        """Whether the round holds an upload signed by ``client_id`` (its own, not a forgery)."""
        public_key = self.public_key_of(client_id)
        text = self._store.read_uploads(round_index).get(client_id)
        if public_key is None or text is None:
            return False
        try:
            self._trust.check_upload(
                text, client_id=client_id, public_key=public_key, round_index=round_index
            )
        except UploadRejected:
            return False
        return True

    def read_upload(self, round_index: int, client_id: str) -> str | bytes:
        """The opened upload of ``client_id`` in a round (the operator only: for inspection):
        bytes under a protocol whose uploads are binary frames (FTS: a JSON header line, then
        the vector's float64 bytes, see
        :func:`~optuna_fedbo.federation.fts.messages.parse_upload`), else text.

        Raises:
            KeyError: If there is no such upload.
            ValueError: If it does not verify or this process cannot open it, or the federation
                has secure aggregation (there is no single upload to read).
        """
        if self._config.secure_aggregation is not None:
            raise ValueError(no_single_upload(self.name))
        public_key = self.public_key_of(client_id)
        if public_key is None:
            raise ValueError(f"{client_id!r} is not enrolled in federation {self.name!r}.")
        text = self._store.read_uploads(round_index)[client_id]
        opened = self._trust.open_upload_bytes(
            text, client_id=client_id, public_key=public_key, round_index=round_index
        )[1]
        return opened if self._config.protocol.binary_uploads else text_of(opened)

    def read_broadcast(self, trial_id: int) -> tuple[int, str]:
        """``(round, payload)`` of a verified broadcast; checks this process's receipts.

        Raises:
            UntrustedRecordError: If the broadcast does not verify.
        """
        broadcast = self._store.read_verified_broadcast(trial_id)
        missed = []
        with self._lock:
            for client_id, (sent_round, receipt, resend) in list(self._sent.items()):
                if sent_round == broadcast.round and receipt not in broadcast.receipts:
                    missed.append((client_id, resend))
                if sent_round <= broadcast.round:
                    del self._sent[client_id]
        for client_id, resend in missed:
            _logger.warning(
                f"{client_id}: the upload for round {broadcast.round} of {self.name!r} is not "
                "in its broadcast (it arrived after the server closed the round, or the server "
                "refused it)"
                + ("; it is re-sent to the open round." if resend is not None else ".")
            )
            if resend is not None:
                try:
                    resend()
                except (KeyError, ValueError) as error:
                    _logger.warning(f"{client_id}: re-sending the upload failed ({error}).")
        return broadcast.round, broadcast.payload


__all__ = ["Relay"]

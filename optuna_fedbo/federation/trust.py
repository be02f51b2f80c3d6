"""Sealed uploads and signed records: what makes the shared storage an untrusted relay.

* **Uploads** (a participant -> the server) are sealed with HPKE (RFC 9180: X25519, HKDF-SHA256,
  ChaCha20-Poly1305; ``cryptography``'s implementation) to the server's public key and signed
  (Ed25519) by the enrolled participant. Both the HPKE ``info`` and the signature bind the
  federation id, the configuration hash, the round, the participant, a counter and the round's
  *opening* (:mod:`optuna_fedbo.federation._openings`), so a copy into another round, another
  participant's key or another federation fails, an older upload of the same round is
  recognised by its counter, and an upload written before its round opened is refused.
* **Records** written by the server (configuration, enrollments, broadcasts, the ``latest``
  pointer, ledger entries, the budget record, epochs, heartbeats) are signed by the server for a
  *purpose* (what the record is) and the federation id, so a record cannot be replayed as
  another kind of record or into another federation.
* **Participant records** (leases: heartbeats, trial durations, finished and lost marks) are
  signed by the participant's enrolled key for a purpose and the federation id, like the server's;
  what only the server may read in them (host, pid, trial counts and durations) is sealed to it.
* **Private records** of the server (e.g. the Fed-PNE server's state) are sealed to the server's
  own key and signed.

Every check raises :class:`UntrustedRecordError` (or :class:`UploadRejected` for uploads) with the
reason; nothing here logs.
"""

from __future__ import annotations

from collections.abc import Collection
import hashlib
import json
from typing import Any
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke

from optuna_fedbo.federation._codec import canonical_json
from optuna_fedbo.federation._uploads import UploadRejected
from optuna_fedbo.federation.keys import b64
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.keys import ServerIdentity
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.keys import unb64
from optuna_fedbo.federation.keys import verify_signature

#: The one size bound of an upload as stored (characters of the sealed envelope). An FTS upload
#: of ``M = 100`` features is about 1,600; a Fed-PNE phase of 10,000 nodes about 500,000.
MAX_UPLOAD_CHARS: Final[int] = 1_000_000

#: The format of a stored upload: 2, a canonical JSON header (format, participant, round,
#: counter, opening, signature), a newline, then the ciphertext in base64 (1 was one JSON object,
#: the ciphertext one of its fields: a JSON scan of the ciphertext's base64 at every check).
ENVELOPE_FORMAT: Final[int] = 2
_SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)


class UntrustedRecordError(ValueError):
    """A record in the storage that does not verify (forged, tampered with or replayed)."""


def text_digest(text: str) -> str:
    """SHA-256 hex digest of a stored text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _signed_upload(context: bytes, sealed: bytes) -> bytes:
    """What a participant signs of an upload: its binding context and its ciphertext's
    digest."""
    return context + b"\n" + hashlib.sha256(sealed).digest()


def upload_receipt(signed: bytes) -> str:
    """An upload's receipt: a digest prefix (32 hex digits) of what its participant signed
    (:func:`_signed_upload`: the federation, configuration, round, participant, counter,
    opening and the ciphertext's digest).

    It names the upload as exactly as a digest of its stored text would (a text that verifies
    with another receipt is another upload), and costs no pass over the ciphertext: the
    participant and the server each hash the ciphertext once, to sign and to verify it, and
    the receipt is a digest of that digest.
    """
    return hashlib.sha256(signed).hexdigest()[:32]


def text_of(plaintext: bytes) -> str:
    """An opened upload's plaintext as text.

    Raises:
        UploadRejected: If it is not UTF-8.
    """
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise UploadRejected("malformed sealed content") from None


class Trust:
    """Signing, sealing and verification for one federation.

    Args:
        identity: The server's public identity (from the verified configuration).
        config_hash: The configuration hash (uploads are bound to it).
        server_keys: The server's private keys, when this process is the operator's.
    """

    def __init__(
        self, identity: ServerIdentity, config_hash: str, server_keys: ServerKeys | None = None
    ) -> None:
        if server_keys is not None and server_keys.identity != identity:
            raise ValueError("The server keys do not belong to this federation's identity.")
        self.identity = identity
        self.config_hash = config_hash
        self.server_keys = server_keys

    @property
    def federation_id(self) -> str:
        return self.identity.federation_id

    def require_server_keys(self) -> ServerKeys:
        if self.server_keys is None:
            raise UntrustedRecordError(
                "Only the federation's server can do this: its private keys are not on this "
                "machine."
            )
        return self.server_keys

    # --------------------------------------------------------------------- signed records
    def sign(self, purpose: str, body: dict[str, Any]) -> str:
        """A record signed by the server: ``{"body": ..., "sig": ...}`` as canonical JSON."""
        message = canonical_json(body).encode()
        signature = self.require_server_keys().sign(purpose, message)
        return canonical_json({"body": body, "sig": b64(signature)})

    def verify(self, purpose: str, text: Any) -> dict[str, Any]:
        """The body of a record the server signed for ``purpose``.

        Raises:
            UntrustedRecordError: If it is malformed or not signed by the server for ``purpose``.
        """
        body, signature = _split_signed(text)
        if not self.identity.verify(purpose, canonical_json(body).encode(), signature):
            raise UntrustedRecordError(f"the {purpose} record is not signed by the server")
        return body

    def sign_as(self, key: ParticipantKey, purpose: str, body: dict[str, Any]) -> str:
        """A record signed by a participant (``key``): ``{"body": ..., "sig": ...}``."""
        signature = key.sign(purpose, canonical_json(body).encode())
        return canonical_json({"body": body, "sig": b64(signature)})

    def verify_by(self, public_key: bytes, purpose: str, text: Any) -> dict[str, Any]:
        """The body of a record the participant of ``public_key`` signed for ``purpose``.

        Raises:
            UntrustedRecordError: If it is malformed or not signed by that key for ``purpose``
                in this federation.
        """
        body, signature = _split_signed(text)
        message = canonical_json(body).encode()
        if not verify_signature(public_key, self.federation_id, purpose, message, signature):
            raise UntrustedRecordError(
                f"the {purpose} record is not signed by the participant's enrolled key"
            )
        return body

    def sign_config(self, config_json: str) -> str:
        """The server's signature (base64) of the configuration text."""
        return b64(self.require_server_keys().sign("config", config_json.encode()))

    def verify_config(self, config_json: str, signature: Any) -> None:
        """Raises :class:`UntrustedRecordError` unless the server signed ``config_json``."""
        try:
            raw = unb64(signature, "the configuration signature", 64)
        except ValueError as error:
            raise UntrustedRecordError(str(error)) from None
        if not self.identity.verify("config", config_json.encode(), raw):
            raise UntrustedRecordError("the configuration is not signed by the server")

    # ----------------------------------------------------------------------- enrollment
    def enrollment(self, client_id: str, public_key: bytes) -> str:
        """The server-signed enrollment of a participant's public key."""
        return self.sign("enroll", {"client": client_id, "key": b64(public_key)})

    def verify_enrollment(self, text: Any, client_id: Any) -> bytes:
        """The enrolled public key of ``client_id``.

        Raises:
            UntrustedRecordError: If the enrollment does not verify or names another id.
        """
        body = self.verify("enroll", text)
        if body.get("client") != client_id:
            raise UntrustedRecordError("the enrollment names another participant")
        try:
            return unb64(body.get("key"), "the enrolled key", 32)
        except ValueError as error:
            raise UntrustedRecordError(str(error)) from None

    # -------------------------------------------------------------------------- uploads
    def _upload_context(
        self, round_index: int, client_id: str, counter: int, opening: str
    ) -> bytes:
        return canonical_json(
            {
                "federation": self.federation_id,
                "config": self.config_hash,
                "round": int(round_index),
                "client": client_id,
                "counter": int(counter),
                "after": opening,
            }
        ).encode()

    def seal_upload(
        self,
        key: ParticipantKey,
        round_index: int,
        counter: int,
        plaintext: str | bytes,
        opening: str = "",
    ) -> str:
        """Seal ``plaintext`` (text, as UTF-8, or bytes) to the server and sign it as ``key``'s
        upload for ``round_index``, sent after the round's ``opening`` (see
        :mod:`~optuna_fedbo.federation._openings`)."""
        return self.seal_upload_with_receipt(key, round_index, counter, plaintext, opening)[0]

    def seal_upload_with_receipt(
        self,
        key: ParticipantKey,
        round_index: int,
        counter: int,
        plaintext: str | bytes,
        opening: str,
    ) -> tuple[str, str]:
        """:meth:`seal_upload`, and the upload's receipt (:func:`upload_receipt`):
        ``(stored text, receipt)``."""
        context = self._upload_context(round_index, key.client_id, counter, opening)
        raw = plaintext.encode("utf-8") if isinstance(plaintext, str) else plaintext
        sealed = _SUITE.encrypt(raw, self.identity.sealing_public_key(), info=context)
        signed = _signed_upload(context, sealed)
        signature = key.sign("upload", signed)
        header = canonical_json(
            {
                "v": ENVELOPE_FORMAT,
                "client": key.client_id,
                "round": int(round_index),
                "counter": int(counter),
                "after": opening,
                "sig": b64(signature),
            }
        )
        # Canonical JSON holds no newline (it escapes one in a string), nor does base64.
        return f"{header}\n{b64(sealed)}", upload_receipt(signed)

    def check_upload(
        self,
        text: Any,
        *,
        client_id: str,
        public_key: bytes,
        round_index: int,
        openings: Collection[str] | None = None,
    ) -> tuple[int, bytes, bytes, str]:
        """Check an upload's envelope and signature without opening it (anyone can).

        Args:
            text: The stored upload.
            client_id: The participant it is stored under.
            public_key: That participant's enrolled key.
            round_index: The round it is stored in.
            openings: The openings of ``round_index`` (``None``: not checked): an upload that
                follows none of them was written before the round opened.

        Returns:
            ``(counter, sealed bytes, binding context, receipt)`` (:func:`upload_receipt`).

        Raises:
            UploadRejected: With the reason (oversized, malformed, another round or participant,
                not signed by the enrolled key, written before its round opened).
        """
        if not isinstance(text, str):
            raise UploadRejected("not a sealed upload")
        if len(text) > MAX_UPLOAD_CHARS:
            raise UploadRejected(
                f"oversized ({len(text):,} characters; the bound is {MAX_UPLOAD_CHARS:,})"
            )
        header, newline, ciphertext = text.partition("\n")
        try:
            record = json.loads(header)
        except ValueError:
            raise UploadRejected("not a sealed upload (malformed envelope)") from None
        if not newline or not isinstance(record, dict) or record.get("v") != ENVELOPE_FORMAT:
            raise UploadRejected("not a sealed upload (unknown envelope format)")
        counter = record.get("counter")
        upload_round = record.get("round")
        opening = record.get("after")
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (counter, upload_round)):
            raise UploadRejected("not a sealed upload (malformed round or counter)")
        if not isinstance(opening, str):
            raise UploadRejected("not a sealed upload (malformed opening)")
        if record.get("client") != client_id:
            raise UploadRejected(
                f"written under participant {client_id!r} but sent by {record.get('client')!r}"
            )
        if upload_round != round_index:
            raise UploadRejected(
                f"sent for round {upload_round}, found in round {round_index} (a copy)"
            )
        try:
            sealed = unb64(ciphertext, "ciphertext")
            signature = unb64(record.get("sig"), "signature", 64)
        except ValueError as error:
            raise UploadRejected(f"not a sealed upload ({error})") from None
        context = self._upload_context(round_index, client_id, counter, opening)
        signed = _signed_upload(context, sealed)
        if not verify_signature(public_key, self.federation_id, "upload", signed, signature):
            raise UploadRejected(
                "not signed by the enrolled key of this participant (forged, or sent for "
                "another federation or configuration)"
            )
        if openings is not None and opening not in openings:
            raise UploadRejected(
                f"written before round {round_index} opened (it follows no published broadcast "
                f"of round {round_index - 1}): only uploads to the open round count"
            )
        return counter, sealed, context, upload_receipt(signed)

    def open_upload_bytes(
        self,
        text: Any,
        *,
        client_id: str,
        public_key: bytes,
        round_index: int,
        openings: Collection[str] | None = None,
    ) -> tuple[int, bytes]:
        """Check and open an upload found under ``client_id``'s key of round ``round_index``
        (sent after one of its ``openings``, if given): ``(counter, plaintext)``.

        Raises:
            UploadRejected: With the reason (see :meth:`check_upload`; or not sealed to this
                server).
        """
        return self.open_upload_with_receipt(
            text,
            client_id=client_id,
            public_key=public_key,
            round_index=round_index,
            openings=openings,
        )[:2]

    def open_upload_with_receipt(
        self,
        text: Any,
        *,
        client_id: str,
        public_key: bytes,
        round_index: int,
        openings: Collection[str] | None = None,
    ) -> tuple[int, bytes, str]:
        """:meth:`open_upload_bytes`, and the upload's receipt (:func:`upload_receipt`):
        ``(counter, plaintext, receipt)``."""
        counter, sealed, context, receipt = self.check_upload(
            text,
            client_id=client_id,
            public_key=public_key,
            round_index=round_index,
            openings=openings,
        )
        keys = self.require_server_keys()
        try:
            plaintext = _SUITE.decrypt(sealed, keys.sealing_private_key, info=context)
        except (InvalidTag, ValueError):
            raise UploadRejected("cannot be opened (not sealed to this server)") from None
        return counter, plaintext, receipt

    # ------------------------------------------------------------------ sealed to the server
    def seal_to_server(self, info: bytes, plaintext: bytes) -> str:
        """``plaintext`` sealed (HPKE) to the server, bound to ``info``: base64 text."""
        return b64(_SUITE.encrypt(plaintext, self.identity.sealing_public_key(), info=info))

    def open_sealed(self, info: bytes, text: Any) -> bytes:
        """Open what :meth:`seal_to_server` sealed with the same ``info`` (the server only).

        Raises:
            UntrustedRecordError: If it is malformed, bound to another ``info`` or not sealed to
                this server.
        """
        keys = self.require_server_keys()
        try:
            return _SUITE.decrypt(unb64(text, "sealed text"), keys.sealing_private_key, info=info)
        except (InvalidTag, ValueError):
            raise UntrustedRecordError("a sealed field cannot be opened") from None

    # -------------------------------------------------------------------- private records
    def seal_private(self, purpose: str, text: str) -> str:
        """Seal ``text`` to the server itself and sign it (records only the server may read)."""
        info = f"{self.federation_id}\n{purpose}".encode()
        sealed = _SUITE.encrypt(text.encode(), self.identity.sealing_public_key(), info=info)
        return self.sign(purpose, {"ct": b64(sealed)})

    def open_private(self, purpose: str, stored: Any) -> str:
        """Open a record written by :meth:`seal_private`.

        Raises:
            UntrustedRecordError: If it does not verify or cannot be opened.
        """
        body = self.verify(purpose, stored)
        keys = self.require_server_keys()
        info = f"{self.federation_id}\n{purpose}".encode()
        try:
            sealed = unb64(body.get("ct"), "ciphertext")
            return _SUITE.decrypt(sealed, keys.sealing_private_key, info=info).decode()
        except (InvalidTag, ValueError, UnicodeDecodeError):
            raise UntrustedRecordError(f"the {purpose} record cannot be opened") from None


def _split_signed(text: Any) -> tuple[dict[str, Any], bytes]:
    if not isinstance(text, str):
        raise UntrustedRecordError("not a signed record")
    try:
        record = json.loads(text)
    except ValueError:
        raise UntrustedRecordError("not a signed record (malformed)") from None
    if not isinstance(record, dict) or set(record) != {"body", "sig"}:
        raise UntrustedRecordError("not a signed record")
    if not isinstance(record["body"], dict):
        raise UntrustedRecordError("not a signed record (malformed body)")
    try:
        return record["body"], unb64(record["sig"], "signature", 64)
    except ValueError as error:
        raise UntrustedRecordError(str(error)) from None


__all__ = ["MAX_UPLOAD_CHARS", "Trust", "UntrustedRecordError", "text_digest", "upload_receipt"]

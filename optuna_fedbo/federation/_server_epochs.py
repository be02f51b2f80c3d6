"""Server epochs in the storage: one study per server start, claimed in order and signed.

A server claims the next free epoch by creating the study ``NAME:fedbo:server:EEEEEE`` (the one
write a single writer wins) and signs the claim; it stops publishing as soon as a later signed
claim exists. :class:`ServerEpochs` is the part of
:class:`~optuna_fedbo.federation.store.FederationStore` that reads and writes them.
"""

from __future__ import annotations

from collections.abc import Callable
import time

from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage
from optuna.study import StudyDirection

from optuna_fedbo.federation.records import EPOCH_KEY
from optuna_fedbo.federation.trust import Trust
from optuna_fedbo.federation.trust import UntrustedRecordError


class ServerEpochs:
    """The server epochs of a federation's store: a base of ``FederationStore``, whose
    ``storage``, ``name``, ``_trust()`` (verification) and ``warn_once`` it uses."""

    storage: BaseStorage
    name: str
    _trust: Callable[[], Trust]
    warn_once: Callable[[str, str], None]

    def server_epoch_study_name(self, epoch: int) -> str:
        return f"{self.name}:fedbo:server:{epoch:06d}"

    def has_server_epoch(self, epoch: int) -> bool:
        """Whether a study of ``epoch`` exists (claimed, or being claimed)."""
        try:
            self.storage.get_study_id_from_name(self.server_epoch_study_name(epoch))
        except KeyError:
            return False
        return True

    def _signed_epoch(self, epoch: int) -> bool:
        """Whether ``epoch`` was claimed by a server holding the federation's keys."""
        try:
            study_id = self.storage.get_study_id_from_name(self.server_epoch_study_name(epoch))
            value = self.storage.get_study_system_attrs(study_id).get(EPOCH_KEY)
        except KeyError:
            return False
        if value is None:
            return False  # being claimed: its server signs it right after creating it
        try:
            return self._trust().verify("epoch", value).get("epoch") == epoch
        except UntrustedRecordError as error:
            self.warn_once(
                f"epoch:{epoch}",
                f"Ignoring server epoch {epoch} of federation {self.name!r}: {error}.",
            )
            return False

    def superseded(self, epoch: int) -> int | None:
        """The newer epoch a server-signed claim made after ``epoch``, or ``None``.

        Epoch studies anyone may create; only signed claims count, so a forged one cannot stop
        the server.
        """
        newer = epoch + 1
        while self.has_server_epoch(newer):
            if self._signed_epoch(newer):
                return newer
            newer += 1
        return None

    def claim_server_epoch(
        self, start: int = 1, reserve: Callable[[int], bool] | None = None
    ) -> int:
        """Claim the next server epoch from ``start`` on: ``1 +`` the newest claimed one (and
        reserved by ``reserve``, see :mod:`.epoch_pin`), then sign the claim.

        Creating a study is the storage's one write that a single writer wins (a second create
        of the same name raises ``DuplicatedStudyError``), so two servers starting at once get
        different epochs. Epochs are claimed in order, so a server of epoch ``e`` has been
        superseded exactly when a later epoch holds a signed claim.
        """
        epoch = start
        while True:
            while self.has_server_epoch(epoch):
                epoch += 1
            if reserve is not None and not reserve(epoch):
                epoch += 1
                continue
            try:
                study_id = self.storage.create_new_study(
                    [StudyDirection.MINIMIZE], self.server_epoch_study_name(epoch)
                )
            except DuplicatedStudyError:
                epoch += 1  # another server claimed it first: try the next one
                continue
            claim = {"epoch": epoch, "claimed_at": time.time()}
            self.storage.set_study_system_attr(
                study_id, EPOCH_KEY, self._trust().sign("epoch", claim)
            )
            return epoch


__all__ = ["ServerEpochs"]

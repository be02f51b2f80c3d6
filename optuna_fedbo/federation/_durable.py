"""Files in the key folder that must survive a crash of the machine, not only of the process.

A high-water mark or a participant's own count of releases is written *before* what it accounts
leaves the process (a ledger entry is published, a masked input is sent). A rename alone is
atomic but not durable: after a power loss the file system may hold the old file (or, on some,
an empty one) although the input was sent. So the new content is synced to disk, renamed over
the old file, and the directory, which holds the rename, is synced as well, before the caller
goes on.
"""

from __future__ import annotations

import os
from pathlib import Path


def sync_directory(folder: Path) -> None:
    """Make the entries of ``folder`` (a rename, a new file) durable (POSIX; a no-op elsewhere,
    where directories cannot be opened)."""
    if os.name != "posix":  # pragma: no cover - Windows
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_durably(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (mode 0600), atomically and durably: a crash, of the
    process or of the machine, leaves the old or the new file, never half of one, and once this
    returns the new one is on disk."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    sync_directory(path.parent)


__all__ = ["replace_durably", "sync_directory"]

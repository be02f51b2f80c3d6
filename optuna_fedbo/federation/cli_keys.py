"""``optuna-fedbo list`` and ``optuna-fedbo delete``: the federations this machine holds keys of.

Examples::

    optuna-fedbo list                                     # name, id, role, storage, files
    optuna-fedbo delete svm --storage sqlite:///fed.db    # asks first; --yes to skip asking
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from optuna_fedbo.federation.key_folder import list_federations
from optuna_fedbo.federation.key_folder import plan_deletion
from optuna_fedbo.federation.keys import key_home


def add_key_commands(commands: Any, add_keys: Any) -> None:
    """Add ``list`` and ``delete`` to the subcommands ``commands`` (``add_keys``: --key-dir)."""
    listing = commands.add_parser(
        "list",
        help="List the federations this machine holds keys of (server keys, credentials, pins).",
    )
    add_keys(listing)
    delete = commands.add_parser(
        "delete",
        help="Delete a federation: its studies in the storage and its files in the key folder.",
        description="Delete a federation: its studies in the storage (never the participants' "
        "own studies) and its key files, pins and marks in the key folder. Asks first; there "
        "is no undo. A federation whose SQLite or journal file is gone is found by its URL.",
    )
    delete.add_argument("name", help="Federation name.")
    delete.add_argument("--storage", required=True, help="The federation's storage URL.")
    delete.add_argument("--yes", action="store_true", help="Delete without asking.")
    add_keys(delete)


def run_list(args: argparse.Namespace) -> int:
    entries = list_federations(args.key_dir)
    home = key_home(args.key_dir)
    if not entries:
        print(f"no federations in {home}")
        return 0
    print(f"{len(entries)} federation(s) in {home}")
    for entry in entries:
        roles = (["server"] if entry.server else []) + [f"site {p}" for p in entry.participants]
        fingerprint = "?" if entry.fingerprint is None else entry.fingerprint[:16]
        print(
            f"{entry.name or '?'}  id {entry.federation_id}  fingerprint {fingerprint}  "
            f"keys: {', '.join(roles) or 'pin only'}  ({len(entry.files)} files)"
            + ("  ORPHANED: its storage is gone" if entry.orphaned else "")
        )
        for location, state in entry.storages.items():
            print(f"    storage {location}: {state}")
        if not entry.storages:
            print("    storage unknown (no pin)")
        for problem in entry.unreadable:
            print(f"    unreadable: {problem}")
        if entry.orphaned and entry.name is not None:
            location = next(iter(entry.storages))
            print(f"    remove with: optuna-fedbo delete {entry.name} --storage {_url(location)}")
    return 0


def _url(location: str) -> str:
    """A storage URL for a pinned location (``delete`` takes it)."""
    kind, _, path = location.partition(":")
    if kind == "sqlite" and not path.startswith("file:"):
        return f"sqlite:///{path}"
    return location


def run_delete(args: argparse.Namespace) -> int:
    deletion = plan_deletion(args.name, args.storage, args.key_dir)
    if not args.yes:
        if not sys.stdin.isatty():
            raise ValueError(
                f"refusing to delete {deletion.describe()} without confirmation: run it in a "
                "terminal, or pass --yes"
            )
        answer = input(f"Delete {deletion.describe()}? There is no undo. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    deletion.run()
    print(f"deleted {deletion.describe()}")
    return 0


__all__ = ["add_key_commands", "run_delete", "run_list"]

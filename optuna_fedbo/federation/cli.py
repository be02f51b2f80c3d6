"""The ``optuna-fedbo`` command line: create, serve and inspect federations.

Examples::

    optuna-fedbo create --storage sqlite:///fed.db --name svm --n-clients 8 \\
        --search-space '{"C": {"name": "FloatDistribution",
                               "attributes": {"low": 0.001, "high": 1000, "log": true}}}' \\
        --preset dp-fts-de
    optuna-fedbo serve --storage sqlite:///fed.db --name svm --round-timeout 600
    optuna-fedbo status --storage sqlite:///fed.db --name svm

Across machines (the trust model: see the README), the operator gives out the server's
fingerprint and one credential per participant::

    optuna-fedbo fingerprint --storage URL --name svm
    optuna-fedbo enroll --storage URL --name svm --client-id site-3 --out site-3.cred
    optuna-fedbo import-credential site-3.cred        # on site 3's machine

The federations this machine holds keys of, and deleting one with its keys (see
:mod:`.cli_keys`)::

    optuna-fedbo list
    optuna-fedbo delete svm --storage URL

Differential privacy (DP-FTS-DE): ``--preset dp-fts-de`` (protocol and privacy), or
``--privacy-preset dp-fts-de`` (the paper's ``z = 1``,
``q = 0.35``, ``S = 22``, moments accountant) and/or ``--privacy '{"noise_multiplier": 1.0,
"sample_rate": 0.35, "clip_norm": 22, "epsilon_budget": 8}'`` (DPConfig fields, applied on top
of the preset); ``status --ledger`` lists every accounted round. After restoring a backup of the
storage, ``restore-ledger`` carries the privacy spent forward (the server refuses to publish on a
rolled-back ledger until then).

Secure aggregation (the server learns only the sum of at least ``t`` participants' statistics):
``create ... --secure-aggregation`` (optionally ``'{"threshold": 5}'``, SecureAggregation fields).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
import json
import logging
from pathlib import Path
import sys
import time
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.distributions import json_to_distribution

from optuna_fedbo.federation import _serve_watch
from optuna_fedbo.federation._serve_watch import DEFAULT_IDLE_TIMEOUT
from optuna_fedbo.federation.cli_create import add_secure_aggregation
from optuna_fedbo.federation.cli_create import describe_secure_aggregation
from optuna_fedbo.federation.cli_create import privacy_argument
from optuna_fedbo.federation.cli_create import read_json
from optuna_fedbo.federation.cli_create import secure_aggregation_argument
from optuna_fedbo.federation.cli_keys import add_key_commands
from optuna_fedbo.federation.cli_keys import run_delete
from optuna_fedbo.federation.cli_keys import run_list
from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.config import FTSConfig
from optuna_fedbo.federation.fts.presets import PRESETS
from optuna_fedbo.federation.fts.presets import PRIVACY_PRESETS
from optuna_fedbo.federation.keys import b64
from optuna_fedbo.federation.keys import import_credential
from optuna_fedbo.federation.keys import ParticipantKey
from optuna_fedbo.federation.keys import ServerKeys
from optuna_fedbo.federation.keys import unb64
from optuna_fedbo.federation.preset import unpack
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.federation.store import ServerSupersededError
from optuna_fedbo.federation.watermark import restore_ledger
from optuna_fedbo.privacy._rng import refuse_insecure_noise_seed


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage",
        required=True,
        help="Optuna storage URL (sqlite:///fed.db, postgresql://...) or journal file "
        "(journal:PATH or PATH.log).",
    )
    parser.add_argument("--name", required=True, help="Federation name.")
    _add_keys(parser)
    parser.add_argument(
        "--server-fingerprint",
        help="The server's fingerprint (from the operator's `optuna-fedbo fingerprint`), if it "
        "is not pinned in the key directory.",
    )


def _add_keys(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--key-dir",
        help="Key directory (default: $OPTUNA_FEDBO_HOME or ~/.config/optuna-fedbo).",
    )


def _load(args: argparse.Namespace) -> Federation:
    return Federation.load(
        args.name,
        args.storage,
        server_fingerprint=args.server_fingerprint,
        key_dir=args.key_dir,
    )


def _add_trust_commands(commands: Any) -> None:
    """The commands an operator and participants use across machines (see the README)."""
    fingerprint = commands.add_parser(
        "fingerprint", help="Print the server's fingerprint (give it to participants)."
    )
    _add_target(fingerprint)
    enroll = commands.add_parser(
        "enroll",
        help="Enroll a participant (operator): writes its credential file.",
        description="Enroll a participant (operator only). Without --public-key a new key pair "
        "is made and the credential written to --out holds its private key: hand it over on a "
        "secure channel; the participant installs it with `optuna-fedbo import-credential`.",
    )
    _add_target(enroll)
    enroll.add_argument("--client-id", required=True, help="The participant's id.")
    enroll.add_argument(
        "--public-key", help="The participant's public key (from `optuna-fedbo keygen`)."
    )
    enroll.add_argument("--out", required=True, help="Credential file to write (mode 0600).")
    install = commands.add_parser(
        "import-credential", help="Install a participant credential into the key directory."
    )
    install.add_argument("file", help="The credential file from `optuna-fedbo enroll`.")
    _add_keys(install)
    keygen = commands.add_parser(
        "keygen",
        help="Make a participant key pair on this machine; prints the public key to enroll.",
    )
    _add_target(keygen)
    keygen.add_argument("--client-id", required=True, help="Your participant id.")


def _fingerprint(args: argparse.Namespace) -> int:
    federation = _load(args)
    print(federation.fingerprint)
    return 0


def _enroll(args: argparse.Namespace) -> int:
    federation = _load(args)
    out = Path(args.out)
    if out.exists():
        raise ValueError(
            f"{out} exists; choose another --out (credentials are never overwritten)."
        )
    public_key = None if args.public_key is None else unb64(args.public_key, "--public-key", 32)
    key = federation.enroll(args.client_id, public_key)
    key.save(federation.name, out)
    print(
        f"enrolled {args.client_id} in {federation.name}; credential written to {out} "
        + ("(it holds the private key: hand it over securely)" if key.has_private_key else "")
    )
    print(f"server fingerprint {federation.fingerprint}")
    return 0


def _import_credential(args: argparse.Namespace) -> int:
    path = import_credential(args.file, args.key_dir)
    print(f"installed {args.file} as {path}")
    return 0


def _keygen(args: argparse.Namespace) -> int:
    if args.server_fingerprint is None:
        raise ValueError("keygen needs --server-fingerprint (ask the operator).")
    federation = _load(args)
    key = ParticipantKey.generate(federation.federation_id, args.client_id, federation.fingerprint)
    path = key.save(federation.name, key_dir=args.key_dir)
    print(f"key of {args.client_id} written to {path}; send this public key to the operator:")
    print(b64(key.public_key))
    return 0


def _add_refused_noise_seed(parser: argparse.ArgumentParser) -> None:
    # Accepted by the parser only to be refused with a clear message (see main).
    parser.add_argument(
        "--insecure-noise-seed", "--noise-seed", dest="insecure_noise_seed", help=argparse.SUPPRESS
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="optuna-fedbo", description="Federated Bayesian optimization over Optuna storages."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="Log debug messages.")
    commands = parser.add_subparsers(dest="command", required=True)

    create = commands.add_parser("create", help="Create a federation.")
    _add_target(create)
    _add_refused_noise_seed(create)
    create.add_argument(
        "--search-space",
        required=True,
        help="JSON object (or @file) of parameter name -> Optuna distribution JSON "
        "(optuna.distributions.distribution_to_json).",
    )
    create.add_argument("--n-clients", type=int, required=True, help="Number of participants.")
    create.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="Paper preset (default: FTSConfig()); the dp-* presets turn differential privacy "
        "on (DP-FTS-DE's z, q, S and accountant), fts-de is the same protocol without it.",
    )
    create.add_argument(
        "--protocol",
        help="JSON object (or @file) of FTSConfig fields, applied on top of the preset; with "
        '"kind" (e.g. {"kind": "fedpne", "horizon": 500}), another protocol\'s fields.',
    )
    create.add_argument(
        "--privacy-preset",
        choices=sorted(PRIVACY_PRESETS),
        help="Differential privacy preset (default: no differential privacy).",
    )
    create.add_argument(
        "--privacy",
        help="JSON object (or @file) of DPConfig fields (noise_multiplier, sample_rate, "
        "clip_norm, delta, accountant, sampling, epsilon_budget), applied on top of the "
        "privacy preset.",
    )
    create.add_argument("--seed", type=int, default=0, help="Public seed.")
    create.add_argument(
        "--direction",
        choices=("maximize", "minimize"),
        default=None,
        help="The objective's direction; a site whose study has the other one is refused "
        "(default: not checked).",
    )
    add_secure_aggregation(create)

    serve = commands.add_parser(
        "serve",
        help="Run the federation server (poll loop).",
        description=(
            "Run the federation server. One server per federation: starting another one "
            "(e.g. a restart) makes this one stop with exit status 3 before it publishes again."
        ),
    )
    _add_target(serve)
    _add_refused_noise_seed(serve)
    serve.add_argument("--poll-interval", type=float, default=1.0, help="Seconds between polls.")
    serve.add_argument(
        "--round-timeout",
        type=_timeout_argument,
        default="auto",
        help="When a round closes without stragglers: 'auto' (default: 3 times the slowest "
        "running participant's typical trial time, at least 2 s, after the round's first "
        "upload), a number of seconds after the first upload, or 'none' (wait for all N).",
    )
    serve.add_argument(
        "--min-uploads",
        type=_min_uploads_argument,
        default="auto",
        help="Fewest uploads with which a timeout closes a round (default 'auto': half of N).",
    )
    serve.add_argument("--max-rounds", type=int, default=None, help="Stop after this many rounds.")
    serve.add_argument("--timeout", type=float, default=None, help="Stop after this many seconds.")
    serve.add_argument(
        "--idle-timeout",
        type=_timeout_argument,
        default=DEFAULT_IDLE_TIMEOUT,
        help=f"Stop after this many seconds (default {DEFAULT_IDLE_TIMEOUT:g}) in which no "
        "participant ran, once every one that joined has finished; 'none': wait until Ctrl-C.",
    )
    serve.add_argument(
        "--keep-uploads", action="store_true", help="Keep raw uploads after publication."
    )

    status = commands.add_parser("status", help="Show rounds, participants and who is missing.")
    _add_target(status)
    status.add_argument("--json", action="store_true", help="Print JSON.")
    status.add_argument(
        "--ledger", action="store_true", help="Also list every round of the privacy ledger."
    )
    status.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=5.0,
        default=None,
        metavar="SECONDS",
        help="Show the status again every SECONDS (default 5) until every participant has "
        "finished (or Ctrl-C).",
    )
    restore = commands.add_parser(
        "restore-ledger",
        help="After restoring a backup of the storage: carry the privacy spent forward.",
        description="The server refuses to publish on a storage whose privacy ledger is behind "
        "its high-water mark (kept beside its key file). After restoring a backup on purpose, "
        "this writes a signed entry that carries the releases the restored ledger lacks "
        "forward from the mark, so epsilon and the budget count every release ever made. "
        "--trust-storage instead rebuilds a lost mark from the storage's ledger (only if the "
        "storage was not rolled back).",
    )
    _add_target(restore)
    restore.add_argument(
        "--trust-storage",
        action="store_true",
        help="Rebuild a lost high-water mark from the storage's ledger as it is.",
    )
    _add_trust_commands(commands)
    add_key_commands(commands, _add_keys)
    return parser


def _seconds_or_none(value: float | str | None, option: str) -> float | None:
    if isinstance(value, str):  # 'auto' means nothing here
        raise ValueError(f"{option} must be a number of seconds or 'none', got {value!r}.")
    return value


def _timeout_argument(text: str) -> float | str | None:
    if text.lower() in ("auto", "none"):
        return None if text.lower() == "none" else "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected 'auto', 'none' or a number of seconds, got {text!r}"
        ) from None


def _min_uploads_argument(text: str) -> int | str:
    if text.lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer, got {text!r}") from None


_DISTRIBUTION_EXAMPLE = (
    '{"name": "FloatDistribution", "attributes": {"low": 0.001, "high": 1000, "log": true}}'
)


def _search_space(text: str) -> dict[str, BaseDistribution]:
    """Parse ``--search-space``: name -> Optuna distribution JSON, with one-line errors."""
    try:
        record = read_json(text)
    except ValueError as error:
        raise ValueError(f"--search-space is not valid JSON ({error}).") from None
    if not isinstance(record, dict) or not record:
        raise ValueError(
            "--search-space must be a non-empty JSON object of parameter name -> Optuna "
            f'distribution, e.g. {{"C": {_DISTRIBUTION_EXAMPLE}}}.'
        )
    space = {}
    for name, value in record.items():
        try:
            if not isinstance(value, (dict, str)):
                raise ValueError("not a distribution object")
            space[name] = json_to_distribution(
                value if isinstance(value, str) else json.dumps(value)
            )
        except Exception as error:
            raise ValueError(
                f"--search-space: parameter {name!r} is {json.dumps(value)}, not an Optuna "
                f"distribution ({type(error).__name__}: {error}); write e.g. "
                f"{_DISTRIBUTION_EXAMPLE} (optuna.distributions.distribution_to_json)."
            ) from None
    return space


def _create(args: argparse.Namespace) -> int:
    search_space = _search_space(args.search_space)
    preset = PRESETS[args.preset]() if args.preset else FTSConfig()
    protocol: ProtocolConfig
    protocol, preset_privacy = unpack(preset, None)
    if args.protocol:
        overrides = read_json(args.protocol)
        if not isinstance(overrides, dict):
            raise ValueError("--protocol must be a JSON object.")
        if overrides.get("kind", protocol.kind) != protocol.kind:
            # Another protocol (e.g. {"kind": "fedpne", "horizon": 500}): its own defaults.
            protocol = ProtocolConfig.from_dict(overrides)
        else:
            protocol = ProtocolConfig.from_dict({**protocol.to_dict(), **overrides})
    federation = Federation.create(
        args.name,
        search_space=search_space,
        n_clients=args.n_clients,
        storage=args.storage,
        protocol=protocol,
        privacy=privacy_argument(args, preset_privacy, PRIVACY_PRESETS),
        seed=args.seed,
        key_dir=args.key_dir,
        direction=args.direction,
        secure_aggregation=secure_aggregation_argument(args),
    )
    print(f"created {federation.name} (config {federation.config_hash[:12]})")
    print(
        f"server fingerprint {federation.fingerprint}; its private keys are in "
        f"{ServerKeys.path(federation.federation_id, args.key_dir)} (keep them)"
    )
    if federation.privacy is not None:
        dp = federation.privacy
        print(
            f"differential privacy: z {dp.noise_multiplier:g}, q {dp.sample_rate:g}, "
            f"S {dp.clip_norm:g}, delta {dp.delta:.3g}, {dp.accountant} accountant"
            + ("" if dp.epsilon_budget is None else f", epsilon budget {dp.epsilon_budget:g}")
        )
    if federation.secure_aggregation is not None:
        print(describe_secure_aggregation(federation))
    return 0


def _serve(args: argparse.Namespace) -> int:
    idle_timeout = _seconds_or_none(args.idle_timeout, "--idle-timeout")
    federation = _load(args)
    server = FederationServer(
        federation,
        round_timeout=args.round_timeout,
        min_uploads=args.min_uploads,
        discard_uploads=not args.keep_uploads,
    )

    def show(report: RoundReport) -> None:
        if report.budget_exhausted:
            print(
                f"round {report.round}: not published: privacy budget exhausted (epsilon "
                f"{report.epsilon:.4g} spent at delta {report.delta:.3g}); stopping",
                flush=True,
            )
            return
        if report.reason == "secagg-failed":
            print(f"round {report.round}: not published: too few survived", flush=True)
            return
        print(
            f"round {report.round}: {report.n_contributors} contributors ({report.reason})"
            + (f", {len(report.rejected)} rejected" if report.rejected else "")
            + (f", {report.n_recovered} dropouts recovered" if report.n_recovered else "")
            + ("" if report.n_clipped is None else f", {report.n_clipped} clipped")
            + (
                ", none selected by subsampling: noise only"
                if report.n_selected == 0
                or (report.epsilon is not None and not report.n_contributors)
                else ""
            )
            + ("" if report.epsilon is None else f", epsilon {report.epsilon:.4g}"),
            flush=True,
        )

    server.announce()
    print(f"serving {federation.name} from round {server.open_round}", flush=True)
    try:
        server.serve(
            poll_interval=args.poll_interval,
            max_rounds=args.max_rounds,
            timeout=args.timeout,
            callback=show,
            idle_timeout=idle_timeout,
        )
    finally:
        server.announce(stopped="serve ended")
    print(server.summary().format(), flush=True)
    return 0


def _restore_ledger(args: argparse.Namespace) -> int:
    federation = _load(args)
    entry = restore_ledger(federation, trust_storage=args.trust_storage)
    epsilon, delta = federation.privacy_ledger().spent()
    if entry is None:
        print(f"rebuilt the high-water mark of {federation.name} from its ledger")
    else:
        print(f"carried {entry.carried} release(s) forward from the high-water mark")
    print(
        f"privacy spent: epsilon {epsilon:.4g} at delta {delta:.3g} after "
        f"{federation.privacy_ledger().n_accounted()} release(s); serve can go on"
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    federation = _load(args)
    if args.watch is None:
        return _show_status(federation, args)
    try:
        while True:
            print(time.strftime("--- %Y-%m-%d %H:%M:%S ---"), flush=True)
            _show_status(federation, args)
            if federation.lifecycle().ended:
                return 0
            time.sleep(max(args.watch, 0.1))
    except KeyboardInterrupt:
        return 0


def _show_status(federation: Federation, args: argparse.Namespace) -> int:
    lifecycle = federation.lifecycle()
    protocol_status = getattr(federation.channel, "status", None)
    if protocol_status is not None:
        # A protocol with its own status (Fed-PNE: phases, best node, its privacy guarantee).
        report = protocol_status()
        if args.json:
            print(json.dumps({**report.to_dict(), "lifecycle": lifecycle.to_dict()}, indent=2))
        else:
            print(report.format())
            print(lifecycle.format(), flush=True)
        return 0
    status = federation.status()
    entries = federation.ledger_entries() if args.ledger else []
    if args.json:
        record = status.to_dict()
        if args.ledger:
            record["ledger"] = [entry.to_dict() for entry in entries]
        record["lifecycle"] = lifecycle.to_dict()
        print(json.dumps(record, indent=2))
        return 0
    print(status.format())
    print(lifecycle.format(), flush=True)
    if args.ledger:
        if federation.privacy is None:
            print("ledger         none (no differential privacy)")
        else:
            print(f"{'round':>7} {'epsilon':>10} {'noise std':>10} {'phi_max':>9}  accounted at")
            for entry in entries:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.accounted_at))
                print(
                    f"{entry.round:>7d} {entry.epsilon:>10.4f} {entry.noise_std:>10.4g} "
                    f"{entry.phi_max:>9.4g}  {stamp}"
                )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``optuna-fedbo`` console script."""
    args = _parser().parse_args(argv)
    # Rounds are printed; Optuna's own INFO lines (one per uploads study) are only noise here.
    optuna.logging.set_verbosity(logging.DEBUG if args.verbose else logging.WARNING)
    logging.basicConfig(format="[%(levelname)s %(asctime)s] %(name)s: %(message)s")
    logging.getLogger("optuna_fedbo").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    # serve says, periodically, whom it waits for.
    watch_level = logging.DEBUG if args.verbose else logging.INFO
    logging.getLogger(_serve_watch.__name__).setLevel(watch_level)
    handlers = {
        "create": _create,
        "serve": _serve,
        "status": _status,
        "fingerprint": _fingerprint,
        "enroll": _enroll,
        "import-credential": _import_credential,
        "keygen": _keygen,
        "restore-ledger": _restore_ledger,
        "list": run_list,
        "delete": run_delete,
    }
    try:
        if getattr(args, "insecure_noise_seed", None) is not None:
            refuse_insecure_noise_seed(f"optuna-fedbo {args.command}")
        return handlers[args.command](args)
    except (KeyError, ValueError, OSError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"optuna-fedbo {args.command}: error: {_one_line(message)}", file=sys.stderr)
        return 2
    except ServerSupersededError as error:
        print(f"optuna-fedbo {args.command}: stopped: {_one_line(error)}", file=sys.stderr)
        return 3
    except Exception as error:
        if args.verbose:
            raise
        print(
            f"optuna-fedbo {args.command}: error: {type(error).__name__}: {_one_line(error)} "
            "(-v shows the traceback)",
            file=sys.stderr,
        )
        return 1


def _one_line(message: object) -> str:
    lines = str(message).strip().splitlines()
    return lines[0] if lines else repr(message)


if __name__ == "__main__":
    sys.exit(main())

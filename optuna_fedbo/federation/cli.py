"""The ``optuna-fedbo`` command line: create, serve and inspect federations.

Examples::

    optuna-fedbo create --storage sqlite:///fed.db --name svm --n-clients 8 \\
        --search-space '{"C": {"name": "FloatDistribution",
                               "attributes": {"low": 0.001, "high": 1000, "log": true}}}' \\
        --preset dp-fts-de
    optuna-fedbo serve --storage sqlite:///fed.db --name svm --round-timeout 600
    optuna-fedbo status --storage sqlite:///fed.db --name svm

Differential privacy (DP-FTS-DE): ``--privacy-preset dp-fts-de`` (the paper's ``z = 1``,
``q = 0.35``, ``S = 22``, moments accountant) and/or ``--privacy '{"noise_multiplier": 1.0,
"sample_rate": 0.35, "clip_norm": 22, "epsilon_budget": 8}'`` (DPConfig fields, applied on top
of the preset); ``status --ledger`` lists every accounted round.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
import json
import logging
import sys
import time

import optuna
from optuna.distributions import json_to_distribution

from optuna_fedbo.federation.config import ProtocolConfig
from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.federation import Federation
from optuna_fedbo.federation.fts.config import FTSConfig
from optuna_fedbo.federation.fts.presets import PRESETS
from optuna_fedbo.federation.fts.presets import PRIVACY_PRESETS
from optuna_fedbo.federation.server import FederationServer
from optuna_fedbo.federation.server import RoundReport
from optuna_fedbo.federation.store import ServerSupersededError
from optuna_fedbo.privacy._rng import refuse_insecure_noise_seed


def _read_json(text: str) -> object:
    """Parse JSON given inline or as ``@path``."""
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as handle:
            text = handle.read()
    return json.loads(text)


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage",
        required=True,
        help="Optuna storage URL (sqlite:///fed.db, postgresql://...) or journal file "
        "(journal:PATH or PATH.log).",
    )
    parser.add_argument("--name", required=True, help="Federation name.")


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
        "--preset", choices=sorted(PRESETS), help="Protocol preset (default: FTSConfig())."
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
        type=float,
        default=None,
        help="Close a round this many seconds after its first upload, without stragglers.",
    )
    serve.add_argument(
        "--min-uploads", type=int, default=1, help="Fewest uploads with which a timeout closes."
    )
    serve.add_argument("--max-rounds", type=int, default=None, help="Stop after this many rounds.")
    serve.add_argument("--timeout", type=float, default=None, help="Stop after this many seconds.")
    serve.add_argument(
        "--keep-uploads", action="store_true", help="Keep raw uploads after publication."
    )

    status = commands.add_parser("status", help="Show rounds, participants and who is missing.")
    _add_target(status)
    status.add_argument("--json", action="store_true", help="Print JSON.")
    status.add_argument(
        "--ledger", action="store_true", help="Also list every round of the privacy ledger."
    )
    return parser


def _create(args: argparse.Namespace) -> int:
    record = _read_json(args.search_space)
    if not isinstance(record, dict):
        raise ValueError("--search-space must be a JSON object.")
    search_space = {
        name: json_to_distribution(value if isinstance(value, str) else json.dumps(value))
        for name, value in record.items()
    }
    protocol: ProtocolConfig = PRESETS[args.preset]() if args.preset else FTSConfig()
    if args.protocol:
        overrides = _read_json(args.protocol)
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
        privacy=_privacy_argument(args),
        seed=args.seed,
    )
    print(f"created {federation.name} (config {federation.config_hash[:12]})")
    if federation.privacy is not None:
        dp = federation.privacy
        print(
            f"differential privacy: z {dp.noise_multiplier:g}, q {dp.sample_rate:g}, "
            f"S {dp.clip_norm:g}, delta {dp.delta:.3g}, {dp.accountant} accountant"
            + ("" if dp.epsilon_budget is None else f", epsilon budget {dp.epsilon_budget:g}")
        )
    return 0


def _privacy_argument(args: argparse.Namespace) -> DPConfig | None:
    if args.privacy_preset is None and not args.privacy:
        return None
    fields = PRIVACY_PRESETS[args.privacy_preset]().to_dict() if args.privacy_preset else {}
    fields.pop("kind", None)
    if args.privacy:
        overrides = _read_json(args.privacy)
        if not isinstance(overrides, dict):
            raise ValueError("--privacy must be a JSON object of DPConfig fields.")
        fields.update(overrides)
    try:
        return DPConfig(**fields)
    except TypeError as error:
        raise ValueError(f"--privacy: {error}") from None


def _serve(args: argparse.Namespace) -> int:
    federation = Federation.load(args.name, args.storage)
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
        print(
            f"round {report.round}: {report.n_contributors} contributors ({report.reason})"
            + (f", {len(report.rejected)} rejected" if report.rejected else "")
            + ("" if report.n_clipped is None else f", {report.n_clipped} clipped")
            + ("" if report.epsilon is None else f", epsilon {report.epsilon:.4g}"),
            flush=True,
        )

    print(f"serving {federation.name} from round {server.open_round}", flush=True)
    server.serve(
        poll_interval=args.poll_interval,
        max_rounds=args.max_rounds,
        timeout=args.timeout,
        callback=show,
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    federation = Federation.load(args.name, args.storage)
    protocol_status = getattr(federation.channel, "status", None)
    if protocol_status is not None:
        # A protocol with its own status (Fed-PNE: phases, best node, its privacy guarantee).
        report = protocol_status()
        print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
        return 0
    status = federation.status()
    entries = federation.ledger_entries() if args.ledger else []
    if args.json:
        record = status.to_dict()
        if args.ledger:
            record["ledger"] = [entry.to_dict() for entry in entries]
        print(json.dumps(record, indent=2))
        return 0
    print(status.format())
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
    handlers = {"create": _create, "serve": _serve, "status": _status}
    try:
        if getattr(args, "insecure_noise_seed", None) is not None:
            refuse_insecure_noise_seed(f"optuna-fedbo {args.command}")
        return handlers[args.command](args)
    except (KeyError, ValueError, OSError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"optuna-fedbo {args.command}: error: {message}", file=sys.stderr)
        return 2
    except ServerSupersededError as error:
        print(f"optuna-fedbo {args.command}: stopped: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())

"""The ``create`` command's privacy options: ``--privacy-preset``/``--privacy`` (differential
privacy) and ``--secure-aggregation`` (the server learns only the sum of the uploads)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from optuna_fedbo.federation.dp_config import DPConfig
from optuna_fedbo.federation.secagg.config import SecureAggregation


def read_json(text: str) -> object:
    """Parse JSON given inline or as ``@path``."""
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as handle:
            text = handle.read()
    return json.loads(text)


def privacy_argument(
    args: argparse.Namespace, base: DPConfig | None, presets: dict[str, Any]
) -> DPConfig | None:
    """The privacy: ``--privacy-preset`` (one of ``presets``; else the ``--preset``'s), then
    ``--privacy``."""
    if args.privacy_preset is None and not args.privacy:
        return base
    if args.privacy_preset:
        fields = presets[args.privacy_preset]().to_dict()
    else:
        fields = {} if base is None else base.to_dict()
    fields.pop("kind", None)
    if args.privacy:
        overrides = read_json(args.privacy)
        if not isinstance(overrides, dict):
            raise ValueError("--privacy must be a JSON object of DPConfig fields.")
        fields.update(overrides)
    try:
        return DPConfig(**fields)
    except TypeError as error:
        raise ValueError(f"--privacy: {error}") from None


def add_secure_aggregation(create: argparse.ArgumentParser) -> None:
    create.add_argument(
        "--secure-aggregation",
        nargs="?",
        const="{}",
        default=None,
        metavar="JSON",
        help="Secure aggregation: the server learns only the sum of at least t participants' "
        "uploads (the default protocol's pooled statistics). Optionally a JSON object (or "
        "@file) of SecureAggregation fields (threshold, max_observations, step, degree, "
        "step_timeout).",
    )


def secure_aggregation_argument(args: argparse.Namespace) -> SecureAggregation | None:
    """``--secure-aggregation [JSON]`` as a :class:`SecureAggregation` (``None``: off)."""
    if args.secure_aggregation is None:
        return None
    fields = read_json(args.secure_aggregation)
    if not isinstance(fields, dict):
        raise ValueError("--secure-aggregation takes a JSON object of SecureAggregation fields.")
    try:
        return SecureAggregation(**fields)
    except TypeError as error:
        raise ValueError(f"--secure-aggregation: {error}") from None


def describe_secure_aggregation(federation: Any) -> str | None:
    """The ``create`` output line of a federation's secure aggregation (``None``: off)."""
    secure = federation.secure_aggregation
    if secure is None:
        return None
    graph = "every pair" if secure.degree is None else f"SecAgg+, {secure.degree} neighbours"
    return (
        f"secure aggregation: threshold {secure.threshold} of {federation.n_clients}, {graph}, "
        f"at most {secure.max_observations} observations per participant"
    )


__all__ = [
    "add_secure_aggregation",
    "describe_secure_aggregation",
    "privacy_argument",
    "read_json",
    "secure_aggregation_argument",
]

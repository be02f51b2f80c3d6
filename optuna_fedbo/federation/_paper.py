"""What every paper preset shares: the check that overrides keep the paper's configuration."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import math
from typing import Any
from typing import TypeVar
import warnings

ConfigT = TypeVar("ConfigT")


class PaperDepartureWarning(UserWarning):
    """A paper preset was given a value the paper does not use: it is no longer the paper's."""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, bool) or isinstance(b, bool):
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return a == b


def paper_preset(
    name: str,
    base: ConfigT,
    paper: Mapping[str, Sequence[Any]],
    overrides: Mapping[str, Any],
) -> ConfigT:
    """``base`` with ``overrides``, warning for every override the paper does not use.

    Args:
        name: The preset's name (for the warning).
        base: The paper's configuration (a frozen dataclass).
        paper: For each field the paper fixes, the values it uses (the first is the preset's).
            Fields absent here (e.g. a clip norm chosen from a clipped fraction, a value range
            that depends on the objective) are free.
        overrides: The caller's keyword overrides.

    Returns:
        The configuration.

    Raises:
        TypeError: For an unknown field.
    """
    config = dataclasses.replace(base, **overrides)  # type: ignore[type-var]
    for key, value in overrides.items():
        allowed = paper.get(key)
        if allowed is None or any(_same(value, v) for v in allowed):
            continue
        uses = ", ".join(repr(v) for v in allowed)
        warnings.warn(
            f"presets.{name}({key}={value!r}): the paper uses {key} = {uses}; this is no longer "
            "the paper's configuration.",
            PaperDepartureWarning,
            stacklevel=3,
        )
    return config

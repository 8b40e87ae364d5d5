"""Checks of public arguments, with messages that name the argument."""

from __future__ import annotations

import math
import numbers
from typing import Optional

__all__ = ["check_integer", "check_number", "is_integer"]


def is_integer(value, minimum: Optional[int] = None) -> bool:
    """Whether ``value`` is an integer (a Python or NumPy integer, or an integral float
    such as ``2.0`` is not: counts must be given as integers), not a bool, and at least
    ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return False
    return minimum is None or value >= minimum


def check_integer(name: str, value, minimum: int = 0) -> int:
    """``value`` as an ``int``; a :class:`ValueError` naming ``name`` unless it is an
    integer of at least ``minimum``."""
    if not is_integer(value, minimum):
        raise ValueError("{} must be an integer >= {}, got {!r}".format(name, minimum, value))
    return int(value)


def check_number(
    name: str,
    value,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a ``float``; a :class:`ValueError` naming ``name`` unless it is a real
    number in the interval from ``low`` to ``high`` (open at the ends where asked; NaN
    is never accepted)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = (value > low if low_open else value >= low) and (
            value < high if high_open else value <= high
        )
    if not ok:
        raise ValueError(
            "{} must be a number in {}{}, {}{}, got {!r}".format(
                name, "(" if low_open else "[", low, high, ")" if high_open else "]", value
            )
        )
    return value

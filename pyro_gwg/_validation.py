"""Checks of public arguments, with messages that name the argument."""

from __future__ import annotations

import math
import numbers
from typing import Optional, Tuple

from pyro_gwg.proposals.balancing import BALANCING

__all__ = ["check_balancing", "check_bool", "check_integer", "check_number", "is_integer"]


def is_integer(value, minimum: Optional[int] = None) -> bool:
    """Whether ``value`` is an integer (a Python or NumPy integer; not a bool, and not an
    integral float such as ``2.0``: counts are given as integers) of at least
    ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return False
    return minimum is None or value >= minimum


def check_integer(name: str, value, minimum: int = 0, meaning: Optional[str] = None) -> int:
    """``value`` as an ``int``.

    :raises TypeError: naming ``name`` (and ``meaning``, e.g. ``"draws per chain"``) unless
        ``value`` is an integer.
    :raises ValueError: unless it is at least ``minimum``.
    """
    what = " ({})".format(meaning) if meaning else ""
    if not is_integer(value):
        raise TypeError(
            "{} must be an integer{}, got {!r} of type {}.".format(
                name, what, value, type(value).__name__
            )
        )
    if value < minimum:
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(
            minimum, "an integer >= {}".format(minimum)
        )
        raise ValueError("{} must be {}{}, got {}.".format(name, kind, what, value))
    return int(value)


def check_bool(name: str, value) -> bool:
    """``value`` as a ``bool`` (Python or NumPy); a :class:`TypeError` naming ``name``
    for anything else."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise TypeError(
            "{} must be a bool (True or False), got {!r} of type {}.".format(
                name, value, type(value).__name__
            )
        )
    return bool(value)


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


def check_balancing(
    kernel: str, balancing: Optional[str], temperature: Optional[float]
) -> Tuple[Optional[str], Optional[float]]:
    r"""The ``(balancing, temperature)`` of a locally balanced proposal (GWG,
    LocallyBalanced) from the two arguments that can set it.

    ``balancing`` names the balancing function (:data:`~pyro_gwg.proposals.balancing.BALANCING`);
    ``temperature`` :math:`\tau` gives the logits :math:`\log t / \tau`, the function
    :math:`g(t) = t^{1 / \tau}`, balanced only for :math:`\tau = 2`, which is
    ``balancing="sqrt"``. Neither given: ``("sqrt", 2.0)``; a temperature other than 2:
    ``(None, tau)``; a balancing function other than ``"sqrt"``: ``(name, None)``.

    :param str kernel: the kernel's name, for the messages.
    :raises ValueError: for an unknown name, a temperature that is not a positive
        number, or both arguments with different meanings.
    """
    if temperature is not None:
        temperature = check_number(
            "temperature", temperature, 0, math.inf, low_open=True, high_open=True
        )
    if balancing is not None and balancing not in BALANCING:
        raise ValueError(
            "balancing must be one of {}, got {!r}".format(
                ", ".join(repr(name) for name in BALANCING), balancing
            )
        )
    if balancing is None:
        balancing = "sqrt" if temperature in (None, 2.0) else None
    elif temperature is not None and (balancing, temperature) != ("sqrt", 2.0):
        raise ValueError(
            "{}(balancing={!r}, temperature={!r}) gives the proposal twice: balancing "
            "chooses the function g(t) of the target ratio and temperature tau the "
            "function t ** (1 / tau) (tau = 2 is balancing='sqrt'). Give one of "
            "them.".format(kernel, balancing, temperature)
        )
    return balancing, (2.0 if balancing == "sqrt" else temperature)

"""Warnings attributed to the user's line.

A warning raised while a model is traced or a sampler runs is reached through stacks of
different depths: ``pyro_gwg.MCMC.run``, ``pyro.infer.MCMC.run`` (which calls the
kernel's ``setup`` and ``cleanup``), a mixed kernel, an estimator. A fixed
``stacklevel`` points into the library for some of them. :func:`warn` walks the stack
instead, to the first frame outside pyro-gwg, Pyro and PyTorch.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from typing import List, Sequence, Type

import pyro
import torch

__all__ = ["name_list", "warn"]

_LIBRARIES = tuple(
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep
    for module in (sys.modules[__package__], pyro, torch)
)


def warn(message: str, category: Type[Warning] = UserWarning) -> None:
    """:func:`warnings.warn` at the first caller outside pyro-gwg, Pyro and PyTorch
    (the outermost library frame when every frame is one, as in a worker process).

    :param str message: the warning's text.
    :param type category: its class.
    """
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _LIBRARIES
    ):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def name_list(names: Sequence[str], limit: int = 10, quote: bool = True) -> str:
    """Names for a warning that concerns many of them, compactly: runs of names that
    differ only by consecutive integer suffixes as ranges (``'z_0'..'z_29'``), at most
    ``limit`` items, then how many more.

    :param names: the names, in order.
    :param int limit: the most items listed.
    :param bool quote: put each name in quotes.
    :rtype: str
    """
    runs: List[List[str]] = []  # each: names with one prefix and consecutive suffixes
    previous = None
    for name in names:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        key = (match.group(1), int(match.group(2))) if match else None
        if (
            runs
            and key is not None
            and previous is not None
            and key
            == (
                previous[0],
                previous[1] + 1,
            )
        ):
            runs[-1].append(name)
        else:
            runs.append([name])
        previous = key
    form = "'{}'" if quote else "{}"
    items: List[str] = []
    for run in runs:
        if len(run) > 2:
            items.append((form + ".." + form).format(run[0], run[-1]))
        else:
            items.extend(form.format(name) for name in run)
    more = len(items) - limit
    return ", ".join(items[:limit]) + (" and {} more".format(more) if more > 0 else "")

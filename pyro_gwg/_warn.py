"""Warnings attributed to the user's line.

A warning raised while a model is traced or a sampler runs is reached through stacks of
different depths: ``pyro_gwg.MCMC.run``, ``pyro.infer.MCMC.run`` (which calls the
kernel's ``setup`` and ``cleanup``), a mixed kernel, an estimator. A fixed
``stacklevel`` points into the library for some of them. :func:`warn` walks the stack
instead, to the first frame outside pyro-gwg, Pyro and PyTorch.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Type

import pyro
import torch

__all__ = ["warn"]

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

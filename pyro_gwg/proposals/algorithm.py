"""The functional form of a sampler: an ``(init, step)`` pair of pure functions.

Every algorithm of :mod:`pyro_gwg.proposals` has a ``build_<name>(density, **static)``
function in its module, in the style of BlackJAX: everything derived from the density
and the static settings (candidate grids, Hamming-ball shifts, value windows, fixed
blocks) is computed there once and closed over, so that

* ``init(codes)`` maps long ``[C, D]`` states to the algorithm's state named tuple
  (``codes``, ``log_joint`` first, then what the step carries), and
* ``step(state)`` returns ``(new_state, info)``, ``info`` a named tuple of ``[C]``
  tensors,

read nothing but their arguments and what ``build`` closed over. Settings that change
during warmup and live in the state (a step size, a preconditioner) are adapted by
:mod:`pyro_gwg.adaptation`; settings that fix a tensor shape (a number of flips) are
``build`` arguments, and a change builds the pair anew.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Tuple

import torch

__all__ = ["Algorithm"]


class Algorithm(NamedTuple):
    """``(init, step)``: see the module docstring."""

    init: Callable[[torch.Tensor], NamedTuple]
    step: Callable[[NamedTuple], Tuple[NamedTuple, NamedTuple]]

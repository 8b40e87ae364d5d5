r"""Balancing functions of locally balanced proposals (Zanella 2020 [Zanella2020]_), in
log space.

A locally balanced proposal over the neighbours :math:`N(x)` of a state weighs each
move by a function of the target ratio :math:`t = \pi(x') / \pi(x)`,

.. math:: q(x' \mid x) \propto g\big(\pi(x') / \pi(x)\big), \qquad x' \in N(x),

and it is *locally balanced* when :math:`g(t) = t\, g(1/t)` for every :math:`t > 0`.
Gibbs-With-Gradients (Grathwohl et al. 2021 [Grathwohl2021]_, Eqs. 3-6) replaces
:math:`\log t = f(x') - f(x)` by its first-order estimate :math:`\tilde d` and, with
:math:`g(t) = \sqrt t`, gets the logits :math:`\tilde d / 2`; any other balancing
function gives the logits :math:`\log g(e^{\tilde d})`. The functions here compute them
from :math:`\log t` without forming :math:`t`, so that a large :math:`|\log t|` neither
overflows nor underflows:

* ``"sqrt"``: :math:`g(t) = \sqrt t`, :math:`\log g(e^s) = s / 2` (GWG's temperature 2);
* ``"barker"``: :math:`g(t) = t / (1 + t)`, :math:`\log g(e^s) = \log\sigma(s)`
  (Barker's acceptance function; Zanella 2020);
* ``"min"``: :math:`g(t) = \min(1, t)`, :math:`\log g(e^s) = \min(s, 0)` (DISCS,
  Goshvadi et al. 2023 [Goshvadi2023]_);
* ``"max"``: :math:`g(t) = \max(1, t)`, :math:`\log g(e^s) = \max(s, 0)` (DISCS).

All four are locally balanced: :math:`t \sqrt{1/t} = \sqrt t`;
:math:`t \cdot \frac{1/t}{1 + 1/t} = \frac{t}{1 + t}`;
:math:`t \min(1, 1/t) = \min(t, 1)`; :math:`t \max(1, 1/t) = \max(t, 1)` (``max`` is as
balanced as ``min``: the condition holds for both; they differ in how strongly they
favour uphill moves). In log space the condition reads
:math:`\log g(e^s) = s + \log g(e^{-s})`. An invalid move, :math:`s = -\infty`,
keeps the logit :math:`-\infty` under each of them (for ``max`` explicitly, since
:math:`\max(1, 0) = 1`).
"""

from __future__ import annotations

from typing import Callable, Dict

import torch
import torch.nn.functional as F

__all__ = ["BALANCING", "balanced_logits", "log_barker", "log_max", "log_min", "log_sqrt"]


def log_sqrt(log_ratio: torch.Tensor) -> torch.Tensor:
    r""":math:`\log \sqrt{e^s} = s / 2`, the balancing function of GWG's temperature 2.

    :param torch.Tensor log_ratio: :math:`s`, any shape; ``-inf`` for invalid moves.
    :rtype: torch.Tensor
    """
    return log_ratio / 2.0


def log_barker(log_ratio: torch.Tensor) -> torch.Tensor:
    r"""Barker's :math:`\log \frac{e^s}{1 + e^s} = \log\sigma(s)` (stable for any ``s``).

    :param torch.Tensor log_ratio: :math:`s`, any shape; ``-inf`` for invalid moves.
    :rtype: torch.Tensor
    """
    return F.logsigmoid(log_ratio)


def log_min(log_ratio: torch.Tensor) -> torch.Tensor:
    r""":math:`\log \min(1, e^s) = \min(s, 0)`.

    :param torch.Tensor log_ratio: :math:`s`, any shape; ``-inf`` for invalid moves.
    :rtype: torch.Tensor
    """
    return log_ratio.clamp(max=0.0)


def log_max(log_ratio: torch.Tensor) -> torch.Tensor:
    r""":math:`\log \max(1, e^s) = \max(s, 0)`; invalid moves (:math:`s = -\infty`)
    stay :math:`-\infty`.

    :param torch.Tensor log_ratio: :math:`s`, any shape; ``-inf`` for invalid moves.
    :rtype: torch.Tensor
    """
    return torch.where(log_ratio > -float("inf"), log_ratio.clamp(min=0.0), log_ratio)


#: balancing function name -> :math:`s \mapsto \log g(e^s)`
BALANCING: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sqrt": log_sqrt,
    "barker": log_barker,
    "min": log_min,
    "max": log_max,
}


def balanced_logits(log_ratio: torch.Tensor, balancing: str = "sqrt") -> torch.Tensor:
    r"""Proposal logits :math:`\log g(e^{s})` of the balancing function ``balancing``.

    :param torch.Tensor log_ratio: :math:`s`: exact or estimated log-density changes
        of the moves, ``[C, D, M]``, ``-inf`` for invalid moves.
    :param str balancing: a key of :data:`BALANCING`.
    :rtype: torch.Tensor
    """
    return BALANCING[balancing](log_ratio)

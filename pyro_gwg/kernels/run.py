"""One run of a kernel's chains apart from the kernel: :class:`ChainRun` (the model's
density and the chain driver of a run, or of one block of its chains), the
:class:`RunReport` its blocks share, and the warnings at the end of a run about chains
and coordinates that did not move (:class:`StuckChainWarning`), with the exact
conditional probabilities that tell a stuck chain from a posterior sure of its state
(:func:`leave_probabilities`).
"""

from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from pyro_gwg._warn import name_list, warn
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.driver import ChainDriver
from pyro_gwg.sites import BINARY

__all__ = ["ChainRun", "RunReport", "StuckChainWarning", "leave_probabilities", "warn_if_stuck"]

#: a chain that changes state in less than this fraction of its steps after warmup
#: (and at least ``STUCK_MIN_STEPS`` steps) is reported by a :class:`StuckChainWarning`,
#: unless its state is one the posterior is sure of (see ``STUCK_EXPECTED_MOVES``)
STUCK_FRACTION = 0.01
STUCK_MIN_STEPS = 100
#: a chain, or a coordinate that never changed in any chain, is reported as stuck only
#: where an exact single-site Gibbs sampler (each step redraws one coordinate, chosen at
#: random, from its conditional distribution at the final state) would have changed it
#: at least this many times in the same steps, expected, or (a coordinate) where the
#: chains hold it at different values; else the posterior is sure of its value and never
#: leaving it is what an exact sampler does
STUCK_EXPECTED_MOVES = 10.0
#: most states next to the final ones evaluated for that check (per block of chains),
#: and most states per run of the model (and in all, for a model evaluated one state
#: at a time)
STUCK_PROBE_LIMIT = 1 << 16
STUCK_PROBE_CHUNK = 1024


class StuckChainWarning(UserWarning):
    """After warmup, a chain almost never changed state, or coordinates never changed in
    any chain, where the posterior is not sure of their values: the draws may not
    represent the posterior. Once per cause and run, at its end."""


class ChainRun:
    """One run of a kernel's chains on a model, or one block of a run's chains, from
    :meth:`~pyro_gwg.kernels.base.DiscreteKernel.start`: the per-run state, apart from
    the kernel.

    :ivar ModelDensity energy: the model's density.
    :ivar ChainDriver driver: runs the transitions (see :meth:`ChainDriver.run
        <pyro_gwg.driver.ChainDriver.run>`).
    :ivar report: what the run found so far, for the warnings at its end (pass it to
        the next block's :meth:`~pyro_gwg.kernels.base.DiscreteKernel.start`).
    """

    def __init__(
        self,
        kernel,
        energy: ModelDensity,
        driver: ChainDriver,
        report: RunReport,
        block: Tuple[int, int, int],
    ) -> None:
        self.kernel, self.energy, self.driver = kernel, energy, driver
        self.report, self.block = report, block

    @property
    def state(self) -> NamedTuple:
        """Current batched kernel state (``codes [C, D]``, ``log_joint [C]``, ...)."""
        return self.driver.state

    def current_values(self) -> Dict[str, torch.Tensor]:
        """Model values of the current state of every chain, ``[C, ...]``, as
        :meth:`~pyro_gwg.kernels.base.DiscreteKernel.current_values` gives them."""
        return self.energy.values_from_codes(self.driver.state.codes)

    def finish(self) -> None:
        """End the block: add its moves to the report and, after the last block of the
        run, warn once per cause (:class:`StuckChainWarning`); the driver's background
        compiles go on to fill the disk cache (see
        :meth:`~pyro_gwg.driver.ChainDriver.close`)."""
        self.driver.close()
        self._note_moves()
        self.report.batching = self.energy.batching
        if self.block[0] == self.block[1] - 1:  # the last block of chains of the run
            warn_if_stuck(self.kernel, self.report, self.energy)

    def _note_moves(self) -> None:
        """Add the moves after warmup of this block's chains to the run's report: the
        chains that hardly changed state and the coordinates that never changed, with
        the evidence that the posterior is sure of them (see
        :data:`STUCK_EXPECTED_MOVES`)."""
        moves = self.driver.moves
        if moves.moved is None or moves.steps < STUCK_MIN_STEPS:
            return
        codes = self.driver.state.codes
        layout = self.energy.layout
        movable = layout.num_values() > 1
        fraction = moves.moved.double().cpu() / moves.steps
        slow = fraction < STUCK_FRACTION
        unchanged = moves.unchanged & movable
        probed = unchanged.expand(codes.shape).clone()
        probed[slow.to(probed.device)] = movable
        # an exact single-site Gibbs sampler redraws each coordinate steps / D times
        expected = leave_probabilities(self.energy, codes, probed).cpu() * (
            moves.steps / max(int(movable.sum()), 1)
        )
        chains = [
            (self.block[2] + c, float(fraction[c]))
            for c in slow.nonzero().reshape(-1).tolist()
            if float(expected[c].sum()) >= STUCK_EXPECTED_MOVES
        ]
        self.report.add(codes.cpu(), unchanged.cpu(), expected.sum(0), chains, moves.steps)


class RunReport:
    """What the blocks of chains of one run found, for the warnings at its end (one per
    cause): the ``Categorical`` sites checked, how the model evaluates several states
    (chosen once, with its :class:`~pyro_gwg.bridge.batching.BatchingWarning`), whether it
    failed to compile (with its :class:`~pyro_gwg.compile.backends.CompilationWarning`), the
    chains that hardly moved and, over
    the chains, the coordinates that never changed, whether the chains hold them at
    different values, and how often an exact single-site Gibbs sampler would have
    changed them (expected)."""

    def __init__(self) -> None:
        self.categoricals: set = set()
        self.batching: Optional[str] = None  # ModelDensity.batching, once chosen
        self.eager = False  # the model failed to compile (jit_compile="auto")
        self.slow_chains: List[Tuple[int, float]] = []  # (chain, fraction of steps moved)
        self.num_chains = 0
        self.steps = 0
        self.unchanged: Optional[torch.Tensor] = None  # bool [D]
        self.split: Optional[torch.Tensor] = None  # bool [D]
        self.values: Optional[torch.Tensor] = None  # long [D], of the first chain
        self.expected: Optional[torch.Tensor] = None  # float64 [D]

    def add(
        self,
        codes: torch.Tensor,
        unchanged: torch.Tensor,
        expected: torch.Tensor,
        slow_chains: List[Tuple[int, float]],
        steps: int,
    ) -> None:
        """Add a block of chains: final states ``codes [C, D]``, ``unchanged [D]`` in
        all of them, ``expected [D]`` moves summed over them."""
        if self.values is None or self.values.shape != codes.shape[1:]:
            self.values, self.split = codes[0], torch.zeros_like(unchanged)
            self.unchanged, self.expected = unchanged, torch.zeros_like(expected)
        self.split = self.split | (codes != self.values).any(0)
        self.unchanged = self.unchanged & unchanged
        self.expected = self.expected + expected
        self.slow_chains += slow_chains
        self.num_chains += codes.shape[0]
        self.steps = steps


def leave_probabilities(energy, codes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """For each chain ``c`` and coordinate ``d`` where ``mask [C, D]`` holds: the
    conditional probability that coordinate ``d`` takes another value than in
    ``codes[c]`` given the other coordinates (over the values one move away: the other
    categories, the neighbouring integers), from the exact log density of those
    states; 0 elsewhere. At most :data:`STUCK_PROBE_LIMIT` states are evaluated
    (:data:`STUCK_PROBE_CHUNK` for a model evaluated one state at a time), in the order
    of the chains and coordinates; coordinates beyond get probability 1.

    :param energy: a :class:`~pyro_gwg.ModelDensity`.
    :param torch.Tensor codes: long ``[C, D]`` states.
    :param torch.Tensor mask: bool ``[C, D]``.
    :returns: float64 ``[C, D]``.
    """
    layout = energy.layout.with_radius(1)
    grad = torch.zeros(codes.shape + (layout.grad_width,), device=codes.device)
    valid = torch.isfinite(layout.gains(codes, grad)) & mask.unsqueeze(-1)
    moves = valid.nonzero()
    if energy.batching is None and moves.shape[0] > STUCK_PROBE_CHUNK // 4:
        energy.choose_batching(codes)  # rather than one model run per state
    batched = energy.batching is not None
    # (a model evaluated one state at a time: one model run per state)
    limit = STUCK_PROBE_LIMIT if energy.batching in ("plate", "vmap") else STUCK_PROBE_CHUNK
    chain, coord, move = moves[:limit].unbind(-1)
    delta = torch.full(valid.shape, -math.inf, dtype=torch.float64, device=codes.device)
    probed = torch.zeros_like(mask)
    if chain.numel():
        states = codes[chain]
        states[torch.arange(chain.numel(), device=codes.device), coord] = layout.move(
            codes[chain, coord].unsqueeze(0), move.unsqueeze(0), coord.unsqueeze(0)
        )[0]
        base = energy._unchecked_log_joint(codes, batched).double()
        log_joint = torch.cat(
            [
                energy._unchecked_log_joint(part, batched, chains=of).double()
                for part, of in zip(states.split(STUCK_PROBE_CHUNK), chain.split(STUCK_PROBE_CHUNK))
            ]
        )
        delta[chain, coord, move] = torch.nan_to_num(log_joint - base[chain], nan=-math.inf)
        probed[chain, coord] = True
    leave = torch.sigmoid(delta.logsumexp(-1))
    leave = leave.masked_fill(valid.any(-1) & ~probed, 1.0)
    return leave.masked_fill(~mask, 0.0)


def warn_if_stuck(kernel, report: RunReport, energy: ModelDensity) -> None:
    """At the end of a run, warn once about the chains that changed state in almost
    none of their steps after warmup (see :data:`STUCK_FRACTION`), and once about
    the coordinates of ``energy`` that never changed in any chain, where the
    posterior is not sure of them (see :data:`STUCK_EXPECTED_MOVES`)."""
    if report.slow_chains:
        _warn_stuck_chains(kernel, report)
    if report.unchanged is not None and len(report.slow_chains) < report.num_chains:
        # (when every chain got the warning above, it says it all)
        stuck = report.unchanged & (report.split | (report.expected >= STUCK_EXPECTED_MOVES))
        if bool(stuck.any()):
            _warn_unchanged_coordinates(kernel, report, energy, stuck)


def _warn_stuck_chains(kernel, report: RunReport) -> None:
    stuck = [c for c, _ in report.slow_chains]
    warn(
        "After warmup, {} of {} changed state in fewer than {:.0%} of {} steps "
        "(lowest: {:.2%}) although the posterior is not sure of {} state: {} may be "
        "stuck, and {} draws would then not represent the posterior. A likelihood "
        "that is sharply peaked, or initial values far from the posterior, can do "
        "this. Check the draws (trace plots, n_eff), run more warmup, start nearer "
        "the posterior (init_to_value), or use another kernel (Gibbs{}).".format(
            "chains {}".format(", ".join(map(str, stuck)))
            if len(stuck) > 1
            else ("chain {}".format(stuck[0]) if report.num_chains > 1 else "the chain"),
            type(kernel).__name__,
            STUCK_FRACTION,
            report.steps,
            min(f for _, f in report.slow_chains),
            "their" if len(stuck) > 1 else "its",
            "they" if len(stuck) > 1 else "it",
            "their" if len(stuck) > 1 else "its",
            kernel._stuck_advice(),
        ),
        StuckChainWarning,
    )


def _warn_unchanged_coordinates(
    kernel, report: RunReport, energy: ModelDensity, stuck: torch.Tensor
) -> None:
    parts, total, indicators = [], 0, False
    for site, block in zip(energy.sites, energy.split(stuck.unsqueeze(0))):
        block = block[0]
        if not bool(block.any()):
            continue
        index = [tuple(i.tolist()) for i in block.nonzero()]
        total += len(index)
        indicators |= site.kind == BINARY
        labels = ["{}{}".format(site.name, list(i) if i else "") for i in index]
        parts.append(
            "'{}'".format(site.name)
            if site.num_coords == 1
            else "'{}' ({} of {}: {})".format(
                site.name, len(index), site.num_coords, name_list(labels, quote=False)
            )
        )
    gating = indicators and bool(energy.given_names)  # indicators next to continuous sites
    warn(
        "After warmup, {} coordinate(s) never changed in any of the {} chain(s) of {} "
        "in {} steps, although the posterior is not sure of their values (the chains "
        "hold different values, or an exact single-site Gibbs sampler would have "
        "changed each at least {:g} times): {}. The sampler may not be able to move "
        "them, and their draws, n_eff and r_hat then say nothing. Compare with a "
        "longer run, from other initial values, or another kernel{}.".format(
            total,
            report.num_chains,
            type(kernel).__name__,
            report.steps,
            STUCK_EXPECTED_MOVES,
            "; ".join(parts),
            "; indicators whose effect goes through continuous latent sites "
            "(spike-and-slab) move only together with them: integrate those out (see "
            "the documentation on spike-and-slab regression)"
            if gating
            else "",
        ),
        StuckChainWarning,
    )

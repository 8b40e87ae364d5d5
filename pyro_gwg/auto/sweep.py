"""``Sweep``: a different pyro-gwg kernel for each group of sites, in turn."""

from __future__ import annotations

from typing import Dict, List, Mapping

import torch

from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.sweep import build_sweep
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["Sweep"]


class Sweep(DiscreteKernel):
    r"""A deterministic sweep of pyro-gwg kernels, each over its own sites with the
    other sites held fixed (see :mod:`pyro_gwg.proposals.sweep`): e.g. exact Gibbs for
    an index site and GWG for a block of coupled bits,
    ``Sweep(model, {"k": Gibbs(), "x": GWG()})``. Each kernel's step leaves the
    conditional of its sites invariant, so the sweep is exact.

    :class:`~pyro_gwg.Auto` builds one when its plan gives the sampled sites different
    kernels. A sweep runs eagerly (``jit_compile`` is ``False``) and does not adapt its
    kernels during warmup: give them fixed settings (``GWG(num_flips=1)``, a fixed
    ``step_size``). A step costs the steps of its kernels plus one evaluation (with the
    gradient where a kernel needs it) per kernel, at the state the previous kernel left.

    Per-draw statistics: ``accepted`` (whether the state changed), ``accept_prob``
    (the mean over the kernels), ``num_changed``, ``energy_evals``, ``grad_evals``
    (summed over the kernels) and ``log_joint`` (see
    :class:`~pyro_gwg.DiscreteKernel`).

    :param callable model: a Pyro model.
    :param dict kernels: ``{site: kernel}`` (pyro-gwg kernels built without a model);
        every latent discrete site that is not summed out must have one, and sites
        sharing a kernel object form one block.
    :param options: ``max_plate_nesting`` and ``init_strategy`` (see
        :class:`~pyro_gwg.DiscreteKernel`).

    Example::

        >>> from pyro_gwg import GWG, Gibbs
        >>> sweep = Sweep(None, {"k": Gibbs(), "x": GWG()})
        >>> sorted(sweep.kernels)
        ['k', 'x']
    """

    def __init__(self, model=None, kernels: Mapping[str, DiscreteKernel] = None, **options) -> None:
        if not isinstance(kernels, Mapping) or not kernels:
            raise TypeError(
                "Sweep: kernels must be a non-empty dict {{site: pyro-gwg kernel}}, "
                "got {!r}".format(kernels)
            )
        for name, kernel in kernels.items():
            if not isinstance(kernel, DiscreteKernel) or isinstance(kernel, Sweep):
                raise TypeError(
                    "Sweep: the kernel of site '{}' must be a pyro-gwg kernel (GWG, "
                    "Gibbs, ...), got {!r}".format(name, kernel)
                )
            if getattr(kernel, "adapt_num_flips", False) or getattr(
                kernel, "adapt_step_size", False
            ):
                raise ValueError(
                    "Sweep: the kernel of site '{}' adapts during warmup, which a sweep "
                    "does not run; give it fixed settings (e.g. GWG(num_flips=1), "
                    "adapt_step_size=False).".format(name)
                )
        if options.get("jit_compile", False):
            raise ValueError(
                "Sweep runs eagerly; jit_compile must be False, got {!r}.".format(
                    options["jit_compile"]
                )
            )
        options["jit_compile"] = False
        super().__init__(model, **options)
        self.kernels: Dict[str, DiscreteKernel] = dict(kernels)
        self.needs_gradient = any(k.needs_gradient for k in self.kernels.values())
        self.evaluates_states = any(k.evaluates_states for k in self.kernels.values())

    def build(self, density) -> Algorithm:
        """The sweep on ``density`` (a :class:`~pyro_gwg.ModelDensity`: the blocks are
        its sites' coordinates).

        :rtype: Algorithm
        """
        sites = {site.name: site for site in density.sites}
        missing = sorted(set(sites) - set(self.kernels))
        unknown = sorted(set(self.kernels) - set(sites))
        if missing or unknown:
            raise UnsupportedModelError(
                "Sweep: every sampled discrete site needs a kernel and every kernel a "
                "sampled discrete site; without a kernel: {}; not a sampled site: "
                "{}.".format(missing or "none", unknown or "none")
            )
        groups: List[tuple] = []
        for name, kernel in self.kernels.items():
            site = sites[name]
            coords = torch.arange(site.offset, site.offset + site.num_coords)
            for group in groups:
                if group[0] is kernel:
                    group[1].append(coords)
                    break
            else:
                groups.append((kernel, [coords]))
        device = density.layout.lower.device
        blocks = [
            (torch.cat(coords).to(device), kernel.build, kernel.needs_gradient)
            for kernel, coords in groups
        ]
        return build_sweep(density, blocks)

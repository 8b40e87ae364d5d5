r"""``MixedGibbs``: HMC/NUTS on the continuous sites, a discrete kernel on the rest.

For a model with continuous latent sites :math:`\theta` and discrete latent sites
:math:`x`, one :class:`MixedGibbs` step is a deterministic-scan Metropolis-within-Gibbs
sweep

.. math:: \theta' \sim K_{\mathrm{HMC}}(\theta, \cdot \mid x), \qquad
          x' \sim K_{\mathrm{discrete}}(x, \cdot \mid \theta'),

each kernel leaving its conditional :math:`p(\theta \mid x, y)` or
:math:`p(x \mid \theta, y)` invariant, so the sweep leaves the joint posterior
invariant. Each kernel sees the other's sites as observed: the discrete kernel takes
the continuous values as an argument of each step (its model is conditioned on them,
see :meth:`~pyro_gwg.DiscreteKernel.setup_given`), HMC/NUTS runs the model
conditioned on the discrete values that the sweep holds; sites marked
``infer={"enumerate": "parallel"}`` are summed out by both. After each half-step the
other kernel's cached log density is refreshed, because its conditioning values
changed.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Dict, Optional

import pyro.poutine as poutine
import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_gwg import _trace
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["MixedGibbs"]


class MixedGibbs(MCMCKernel):
    """Alternate Pyro's HMC or NUTS on the continuous sites with a pyro-gwg kernel on
    the discrete sites; a :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel`.

    Both kernels adapt during warmup (step size and mass matrix of HMC/NUTS, and
    whatever the discrete kernel adapts).

    :param inner_kernel: a :class:`~pyro.infer.HMC` or :class:`~pyro.infer.NUTS`
        kernel built on the model (``jit_compile=False``: a compiled potential would
        freeze the discrete values).
    :param DiscreteKernel discrete_kernel: e.g. ``GWG()`` (its model is taken from
        ``inner_kernel``); its transition compiles as on its own (``jit_compile``),
        with the continuous values as arguments of the compiled function.

    The sweep runs copies of the two kernels, conditioned on each other's sites; the
    kernels passed in are not modified. Read what they adapted from
    :attr:`inner_kernel` and :attr:`discrete_kernel` of this object.

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> from pyro.infer import MCMC, NUTS
        >>> from pyro_gwg import GWG, MixedGibbs
        >>> def model(y):
        ...     locs = pyro.sample("locs", dist.Normal(torch.tensor([-2.0, 2.0]), 1.0).to_event(1))
        ...     with pyro.plate("data", len(y)):
        ...         z = pyro.sample("z", dist.OneHotCategorical(logits=torch.zeros(2)))
        ...         pyro.sample("y", dist.Normal(z @ locs, 1.0), obs=y)
        >>> pyro.set_rng_seed(0)
        >>> mcmc = MCMC(MixedGibbs(NUTS(model), GWG()), num_samples=20, warmup_steps=20,
        ...             disable_progbar=True)
        >>> mcmc.run(torch.tensor([-2.1, 1.7, 2.4]))
        >>> sorted(mcmc.get_samples())
        ['locs', 'z']
    """

    def __init__(self, inner_kernel, discrete_kernel: DiscreteKernel) -> None:
        if not isinstance(discrete_kernel, DiscreteKernel):
            raise TypeError(
                "MixedGibbs: discrete_kernel must be a pyro-gwg kernel (GWG, ...), got {}".format(
                    type(discrete_kernel).__name__
                )
            )
        self.model = inner_kernel.model
        if self.model is None:
            raise UnsupportedModelError(
                "MixedGibbs needs the inner kernel to be built on the model: "
                "MixedGibbs(NUTS(model), GWG())."
            )
        if _trace.kernel_jit_compiles(inner_kernel):
            raise UnsupportedModelError(
                "MixedGibbs needs jit_compile=False on the HMC/NUTS kernel: its compiled "
                "potential would freeze the values of the discrete sites."
            )
        # the sweep runs copies: the user's kernels stay as they were given
        self.inner_kernel = copy.deepcopy(inner_kernel)
        self.discrete_kernel = copy.deepcopy(discrete_kernel)
        # The discrete kernel conditions the model itself, on the continuous values
        # that each of its steps takes as an argument (its compiled transition takes
        # them as arguments too). Pyro's HMC/NUTS builds its potential from a model once,
        # at setup, and takes nothing else per step: it runs the model conditioned on the
        # discrete values held here, which only this object sets (a new dict after each
        # discrete half-step).
        self.inner_kernel.model = self._model_given_discrete
        self.discrete_kernel.model = self.model
        self._discrete_values: Dict[str, torch.Tensor] = {}
        self._discrete_names: list = []
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None

    @property
    def transforms(self):
        return self.inner_kernel.transforms

    @property
    def initial_params(self) -> Optional[Dict[str, torch.Tensor]]:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: Dict[str, torch.Tensor]) -> None:
        self._initial_params = params

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        trace = _trace.trace_model(
            self.model, args, kwargs, init_strategy=self.discrete_kernel.init_strategy
        )
        discrete, continuous = _latent_sites(trace)
        if not continuous:
            raise UnsupportedModelError(
                "MixedGibbs: the model has no continuous latent sites; use the discrete "
                "kernel on its own."
            )
        if not discrete:
            raise UnsupportedModelError(
                "MixedGibbs: the model has no discrete latent sites to sample (sites "
                "marked for enumeration are summed out); use HMC/NUTS on its own."
            )
        self._discrete_names = discrete
        given = self._initial_params or {}
        self._discrete_values = {
            n: given[n] if n in given else trace.nodes[n]["value"] for n in discrete
        }
        if any(n in given for n in continuous):
            self.inner_kernel.initial_params = {n: given[n] for n in continuous if n in given}
        self.inner_kernel.setup(warmup_steps, *args, **kwargs)
        theta = self.inner_kernel.initial_params
        self.discrete_kernel.initial_params = {
            n: v.to(torch.get_default_dtype()) for n, v in self._discrete_values.items()
        }
        self.discrete_kernel.setup_given(warmup_steps, self._constrained(theta), *args, **kwargs)
        self._initial_params = {**theta, **self.discrete_kernel.initial_params}

    def _model_given_discrete(self, *args, **kwargs):
        """The model conditioned on the current values of the discrete sites (the
        model of HMC/NUTS)."""
        return poutine.condition(self.model, data=self._discrete_values)(*args, **kwargs)

    def _constrained(self, theta: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Model values of HMC's unconstrained values ``theta``."""
        transforms = self.inner_kernel.transforms
        return {n: transforms[n].inv(v) if n in transforms else v for n, v in theta.items()}

    def sample(self, params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        theta = {n: v for n, v in params.items() if n not in self._discrete_names}
        # continuous half-step given x; its cached potential is stale once x moved
        self.inner_kernel.clear_cache()
        theta = self.inner_kernel.sample(theta)
        # discrete half-step from its own state x, given the new theta (which refreshes
        # its cached log density)
        discrete = self.discrete_kernel
        x = discrete.sample({**discrete.params, **self._constrained(theta)})
        values = discrete.energy.values_from_codes(discrete.state.codes)
        self._discrete_values = {n: v[0] for n, v in values.items()}
        return {**theta, **x}

    def logging(self):
        log = OrderedDict(self.inner_kernel.logging() or {})
        log.update({"discrete " + k: v for k, v in (self.discrete_kernel.logging() or {}).items()})
        return log

    def diagnostics(self):
        stats = dict(self.inner_kernel.diagnostics())
        for name, value in self.discrete_kernel.diagnostics().items():
            if name != "divergences":
                stats["discrete " + name] = value
        return stats

    def cleanup(self) -> None:
        self.inner_kernel.cleanup()
        self.discrete_kernel.cleanup()
        self._initial_params = None

    def end_warmup(self) -> None:
        self.inner_kernel.end_warmup()


def _latent_sites(trace):
    """Names of the latent discrete (not enumerated) and continuous sites."""
    discrete, continuous = [], []
    for site in _trace.sample_sites(trace, "latent"):
        if _trace.is_enumerated(site):
            continue
        if site["fn"].support.is_discrete:
            discrete.append(site["name"])
        else:
            continuous.append(site["name"])
    return discrete, continuous

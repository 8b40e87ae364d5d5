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
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import pyro.poutine as poutine
import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_gwg import _trace
from pyro_gwg.kernels.base import DiscreteKernel, HeldInitialParams
from pyro_gwg.kernels.run import ChainRun, RunReport
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["ContinuousChain", "MixedGibbs", "MixedRun", "start_continuous"]


class MixedGibbs(HeldInitialParams, MCMCKernel):
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

    It runs in :class:`pyro.infer.MCMC` (one chain per kernel, as Pyro runs chains)
    and in :class:`pyro_gwg.MCMC`, which batches the discrete half of its chains (see
    :meth:`start`).

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
        # the sweep runs copies: the user's kernels stay as they were given (the first,
        # unconditioned, is the template of the chains of pyro_gwg.MCMC, see start)
        self._inner = copy.deepcopy(inner_kernel)
        self._chain = ContinuousChain(self._inner, self.model)
        self.inner_kernel = self._chain.kernel
        # The discrete kernel conditions the model itself, on the continuous values
        # that each of its steps takes as an argument (its compiled transition takes
        # them as arguments too).
        self.discrete_kernel = copy.deepcopy(discrete_kernel)
        self.discrete_kernel.model = self.model
        self._discrete_names: list = []
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None

    @property
    def transforms(self):
        return self.inner_kernel.transforms

    def _setup_chain(
        self, chain: ContinuousChain, warmup_steps: int, args, kwargs, given: dict
    ) -> Dict[str, torch.Tensor]:
        """Start the continuous half of a chain: its discrete values from ``given`` or
        from a run of the model under the discrete kernel's init strategy, HMC/NUTS
        set up given them; its unconstrained continuous values."""
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
        given = _without_chain_dim(given, trace)
        chain.discrete_values = {
            n: given[n] if n in given else trace.nodes[n]["value"] for n in discrete
        }
        initial = {n: given[n] for n in continuous if n in given}
        return chain.setup(warmup_steps, args, kwargs, initial)

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        chain = self._chain
        theta = self._setup_chain(chain, warmup_steps, args, kwargs, self._initial_params or {})
        self._discrete_names = list(chain.discrete_values)
        self.discrete_kernel.initial_params = _as_floats(chain.discrete_values)
        self.discrete_kernel.setup_given(warmup_steps, chain.constrained(theta), *args, **kwargs)
        self._initial_params = {**theta, **self.discrete_kernel.initial_params}

    def sample(self, params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        # continuous half-step given x (its cached potential is stale once x moved)
        theta = self._chain.step({n: v for n, v in params.items() if n not in self._discrete_names})
        # discrete half-step from its own state x, given the new theta (which refreshes
        # its cached log density)
        discrete = self.discrete_kernel
        x = discrete.sample({**discrete.params, **self._chain.constrained(theta)})
        values = discrete.energy.values_from_codes(discrete.state.codes)
        self._chain.discrete_values = {n: v[0] for n, v in values.items()}
        return {**theta, **x}

    def start(
        self,
        warmup_steps: int,
        model_args: tuple = (),
        model_kwargs: Optional[dict] = None,
        *,
        num_chains: int = 1,
        initial_params: Optional[Dict[str, torch.Tensor]] = None,
        on_compile: Optional[Callable[[Optional[str]], None]] = None,
        block: Tuple[int, int, int] = (0, 1, 0),
        report: Optional[RunReport] = None,
    ) -> MixedRun:
        """Start ``num_chains`` chains of the sweep, as :class:`pyro_gwg.MCMC` runs
        them (the kernel itself is left as it is): one HMC/NUTS kernel per chain (a
        copy of :attr:`inner_kernel`; Pyro has no HMC or NUTS batched over chains),
        each set up as :meth:`setup` sets up the one chain of
        :class:`pyro.infer.MCMC`, and one batched run of the discrete kernel for all
        the chains (:meth:`DiscreteKernel.start
        <pyro_gwg.kernels.base.DiscreteKernel.start>`), each chain's states evaluated
        under its own continuous values.

        :param int warmup_steps: warmup steps (both halves adapt).
        :param tuple model_args: the model's positional arguments.
        :param dict model_kwargs: its keyword arguments.
        :param int num_chains: chains.
        :param dict initial_params: initial values ``{site: [num_chains, ...]}``
            (continuous sites unconstrained, as :meth:`setup` takes them; one chain's
            without the chain dimension), or ``None``.
        :param callable on_compile: told when a compilation starts and ends.
        :param tuple block: ``(block, number of blocks, first chain)``.
        :param report: the previous block's report, or ``None``.
        :rtype: MixedRun
        """
        model_kwargs = dict(model_kwargs or {})
        chains, thetas = [], []
        for c in range(num_chains):
            chain = ContinuousChain(self._inner, self.model)
            given = _chain_values(initial_params, c, num_chains)
            thetas.append(self._setup_chain(chain, warmup_steps, model_args, model_kwargs, given))
            chains.append(chain)
        discrete = self.discrete_kernel.start(
            warmup_steps,
            model_args,
            model_kwargs,
            num_chains=num_chains,
            initial_params=_stacked([_as_floats(ch.discrete_values) for ch in chains], num_chains),
            on_compile=on_compile,
            block=block,
            report=report,
            given=_stacked([ch.constrained(t) for ch, t in zip(chains, thetas)], num_chains),
        )
        return MixedRun(chains, thetas, discrete, warmup_steps)

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


class ContinuousChain:
    """The HMC/NUTS half of one chain: a copy of the inner kernel that runs the model
    conditioned on the chain's discrete values, which only the sweep sets (a new dict
    after each discrete half-step; empty for HMC/NUTS on its own).

    :param inner_kernel: a :class:`~pyro.infer.HMC` or :class:`~pyro.infer.NUTS`
        kernel on ``model`` (copied).
    :param callable model: the model.
    """

    def __init__(self, inner_kernel, model) -> None:
        self.model = model
        self.discrete_values: Dict[str, torch.Tensor] = {}
        self.kernel = copy.deepcopy(inner_kernel)
        self.kernel.model = self._model_given_discrete

    def _model_given_discrete(self, *args, **kwargs):
        """The model conditioned on the current values of the discrete sites (the
        model of HMC/NUTS)."""
        return poutine.condition(self.model, data=self.discrete_values)(*args, **kwargs)

    def setup(self, warmup_steps: int, args: tuple, kwargs: dict, initial: dict):
        """Set the kernel up, from ``initial`` values of its sites (unconstrained) where
        there are; its initial unconstrained values."""
        if initial:
            self.kernel.initial_params = initial
        self.kernel.setup(warmup_steps, *args, **kwargs)
        return self.kernel.initial_params

    def step(self, theta: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """One HMC/NUTS transition from ``theta`` (unconstrained), given the discrete
        values now (the kernel's cached potential is stale once they moved)."""
        self.kernel.clear_cache()
        return self.kernel.sample(theta)

    def constrained(self, theta: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Model values of the kernel's unconstrained values ``theta``."""
        transforms = self.kernel.transforms
        return {n: transforms[n].inv(v) if n in transforms else v for n, v in theta.items()}


class MixedRun:
    """A run of ``C`` chains of :class:`MixedGibbs` in :class:`pyro_gwg.MCMC` (from
    :meth:`MixedGibbs.start`), or of HMC/NUTS alone (:func:`start_continuous`): one
    HMC/NUTS kernel per chain and one batched discrete run
    (:class:`~pyro_gwg.kernels.run.ChainRun`, or ``None``). A sweep is that of
    :meth:`MixedGibbs.sample`, for every chain: the continuous half-step of each chain
    given its discrete values, then one discrete step of all the chains, each given
    its new continuous values.

    :ivar ModelDensity energy: the discrete run's density (``None`` without one).
    :ivar tuple continuous_names: the continuous latent sites.
    """

    def __init__(
        self,
        chains: List[ContinuousChain],
        thetas: List[dict],
        discrete: Optional[ChainRun],
        warmup_steps: int,
    ) -> None:
        self.chains, self.thetas, self.discrete = chains, thetas, discrete
        self.energy = discrete.energy if discrete is not None else None
        self.continuous_names = tuple(thetas[0])
        self.report = discrete.report if discrete is not None else RunReport()
        self.num_warmup = warmup_steps
        self.t = 0
        self.compile_seconds = 0.0
        self._divergences = [0] * len(chains)

    @property
    def driver(self) -> MixedRun:
        """The run itself: it steps its chains as a chain driver does."""
        return self

    @property
    def state(self):
        """The state of the discrete chains (codes ``[C, D]``, ...); codes ``[C, 0]``
        without a discrete run."""
        if self.discrete is not None:
            return self.discrete.state
        device = next(iter(self.thetas[0].values())).device
        return _NoDiscreteState(torch.zeros((len(self.chains), 0), dtype=torch.long, device=device))

    def continuous_values(self) -> Dict[str, torch.Tensor]:
        """Model (constrained) values of the continuous sites, ``[C, ...]``."""
        values = [chain.constrained(theta) for chain, theta in zip(self.chains, self.thetas)]
        return {n: torch.stack([v[n] for v in values]) for n in self.continuous_names}

    def current_values(self) -> Dict[str, torch.Tensor]:
        """Model values of every chain, ``[C, ...]``: discrete sites as the discrete
        run gives them, continuous ones constrained."""
        discrete = self.discrete.current_values() if self.discrete is not None else {}
        return {**discrete, **self.continuous_values()}

    def run(self, num_steps: int, observe=None, every: int = 1, code_dtype=torch.long) -> None:
        """``num_steps`` sweeps of every chain, one at a time (as
        :meth:`ChainDriver.run <pyro_gwg.driver.ChainDriver.run>`; ``observe`` also
        takes ``continuous``, the constrained values ``{site: [C, 1, ...]}``, and the
        statistics are a dict: the discrete kernel's as ``"discrete <name>"`` and
        ``"diverging"``, the divergent HMC/NUTS transitions after warmup)."""
        for _ in range(int(num_steps)):
            start = self.t
            diverging = []
            for c, chain in enumerate(self.chains):
                self.thetas[c] = chain.step(self.thetas[c])
                diverging.append(self._diverged(c))
            continuous = self.continuous_values()
            stats = {}
            codes = self.state.codes.to(code_dtype).unsqueeze(1)
            log_joint = None
            if self.discrete is not None:
                stats, codes, log_joint = self._discrete_step(continuous, code_dtype)
            stats["diverging"] = torch.tensor(diverging, device=codes.device).unsqueeze(1)
            self.t += 1
            if observe is not None:
                observe(
                    start,
                    stats,
                    codes,
                    log_joint,
                    continuous={n: v.unsqueeze(1) for n, v in continuous.items()},
                )

    def _diverged(self, c: int) -> bool:
        """Whether the last HMC/NUTS transition of chain ``c`` diverged (Pyro counts
        divergences after warmup only)."""
        if self.t < self.num_warmup:
            return False
        count = len(self.chains[c].kernel.diagnostics()["divergences"])
        diverged, self._divergences[c] = count > self._divergences[c], count
        return diverged

    def _discrete_step(self, continuous: Dict[str, torch.Tensor], code_dtype):
        """One discrete step of every chain given ``continuous``: its statistics
        ``{"discrete <name>": [C, 1]}``, codes ``[C, 1, D]`` and log joint ``[C, 1]``."""
        run = self.discrete
        given = continuous if len(self.chains) > 1 else {n: v[0] for n, v in continuous.items()}
        run.energy.set_given({n: given[n] for n in run.energy.given_names})
        driver = run.driver
        driver.init(driver.state.codes)  # the same states, whose log density changed
        seen = []
        driver.run(1, lambda *step: seen.append(step), 1, code_dtype)
        self.compile_seconds = driver.compile_seconds
        _, info, codes, log_joint = seen[0]
        values = run.energy.values_from_codes(driver.state.codes)
        for c, chain in enumerate(self.chains):
            chain.discrete_values = {n: v[c] for n, v in values.items()}
        stats = {"discrete " + k: v for k, v in info._asdict().items()}
        return stats, codes, log_joint

    @property
    def background_compile_seconds(self) -> float:
        """The discrete driver's (see :attr:`ChainDriver.background_compile_seconds
        <pyro_gwg.driver.ChainDriver.background_compile_seconds>`)."""
        if self.discrete is None:
            return 0.0
        return self.discrete.driver.background_compile_seconds

    def finish(self) -> None:
        """End the run (the discrete run's warnings, see :meth:`ChainRun.finish
        <pyro_gwg.kernels.run.ChainRun.finish>`)."""
        if self.discrete is not None:
            self.discrete.finish()


class _NoDiscreteState(NamedTuple):
    codes: torch.Tensor


def start_continuous(
    kernel,
    warmup_steps: int,
    model_args: tuple = (),
    model_kwargs: Optional[dict] = None,
    *,
    num_chains: int = 1,
    initial_params: Optional[Dict[str, torch.Tensor]] = None,
    **unused,
) -> MixedRun:
    """Start ``num_chains`` chains of a Pyro HMC or NUTS ``kernel`` on its own (the
    discrete sites of its model all marked for enumeration), as
    :meth:`MixedGibbs.start` starts its continuous halves: one copy of the kernel per
    chain (Pyro has no HMC or NUTS batched over chains).

    :param kernel: a :class:`~pyro.infer.HMC` or :class:`~pyro.infer.NUTS` kernel
        built on a model (``jit_compile`` as the user chose: there are no discrete
        values to freeze).
    :param int warmup_steps: warmup (adaptation) steps.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param int num_chains: chains.
    :param dict initial_params: unconstrained initial values ``{site: [num_chains,
        ...]}`` (one chain's without the chain dimension), or ``None``.
    :param unused: the other arguments of :meth:`MixedGibbs.start` (nothing to
        compile, no discrete run to report on).
    :rtype: MixedRun
    """
    if kernel.model is None:
        raise UnsupportedModelError(
            "pyro_gwg.MCMC runs HMC/NUTS built on a model (NUTS(model)); a potential_fn "
            "has no sites to return."
        )
    model_kwargs = dict(model_kwargs or {})
    if initial_params is not None and num_chains == 1:
        trace = _trace.trace_model(kernel.model, model_args, model_kwargs)
        initial_params = _without_chain_dim(initial_params, trace)
    chains = [ContinuousChain(kernel, kernel.model) for _ in range(num_chains)]
    thetas = [
        chain.setup(
            warmup_steps, model_args, model_kwargs, _chain_values(initial_params, c, num_chains)
        )
        for c, chain in enumerate(chains)
    ]
    return MixedRun(chains, thetas, None, warmup_steps)


def _chain_values(values: Optional[Dict[str, torch.Tensor]], chain: int, num_chains: int) -> dict:
    """The values of one chain of ``values`` (``[num_chains, ...]``; one chain's without
    the chain dimension)."""
    if values is None:
        return {}
    return dict(values) if num_chains == 1 else {k: v[chain] for k, v in values.items()}


def _without_chain_dim(values: dict, trace) -> dict:
    """One chain's values, a leading chain dimension of size 1 dropped where a value has
    one dimension more than the site's value in ``trace`` (a block of one chain of
    :class:`pyro_gwg.MCMC` passes it; :class:`pyro.infer.MCMC` does not)."""
    out = {}
    for name, value in values.items():
        node = trace.nodes.get(name)
        if node is not None and value.dim() == node["value"].dim() + 1 and value.shape[0] == 1:
            value = value[0]
        out[name] = value
    return out


def _stacked(values: List[Dict[str, torch.Tensor]], num_chains: int) -> Dict[str, torch.Tensor]:
    """The chains' values ``{site: [C, ...]}`` (one chain's as they are)."""
    if num_chains == 1:
        return dict(values[0])
    return {n: torch.stack([v[n] for v in values]) for n in values[0]}


def _as_floats(values: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    return {n: v.to(torch.get_default_dtype()) for n, v in values.items()}


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

"""The Pyro ``MCMCKernel`` adapter shared by every discrete kernel.

A kernel class is a thin layer: it validates its settings, says how to build its
algorithm (:meth:`DiscreteKernel.build`, a ``build_<name>`` function of
:mod:`pyro_gwg.proposals` with the kernel's settings: an ``(init, step)`` pair of pure
functions on batched tensors, see :mod:`pyro_gwg.proposals.algorithm`) and, where it
adapts during warmup, which adaptation (:mod:`pyro_gwg.adaptation`). :meth:`setup`
builds the model's density (:class:`~pyro_gwg.ModelDensity`) and a
:class:`~pyro_gwg.driver.ChainDriver`, the one chain loop of the package, which runs
the transitions; :meth:`sample` takes one of them for :class:`pyro.infer.MCMC`.

Declared traits replace type checks: :attr:`DiscreteKernel.needs_gradient` (the step
evaluates the gradient of the log density), :attr:`DiscreteKernel.evaluates_states`
(the step evaluates the log density at many states at once, batched) and
:attr:`DiscreteKernel.exact` (the transitions leave the density invariant).
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_gwg import _trace
from pyro_gwg._validation import check_integer
from pyro_gwg._warn import warn
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.compile.backends import CompilationWarning
from pyro_gwg.compile.modes import JIT_COMPILE, mode_of
from pyro_gwg.driver import UNOBSERVED_STEPS, ChainDriver, checked_algorithm
from pyro_gwg.kernels.run import ChainRun, RunReport
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["DiscreteKernel", "HeldInitialParams", "JIT_MODES"]

#: values of ``jit_compile`` (the keys of :data:`~pyro_gwg.compile.modes.JIT_COMPILE`)
JIT_MODES = tuple(JIT_COMPILE)


class HeldInitialParams:
    """``initial_params`` of Pyro's ``MCMCKernel`` protocol, held as an attribute (set
    by the caller before ``setup``, by ``setup`` after it)."""

    _initial_params: Optional[Dict[str, torch.Tensor]] = None

    @property
    def initial_params(self) -> Optional[Dict[str, torch.Tensor]]:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: Dict[str, torch.Tensor]) -> None:
        self._initial_params = params


class _Block(NamedTuple):
    """Transitions computed for :meth:`DiscreteKernel.sample`, served one per call."""

    info: NamedTuple  # the step statistics, fields [C, n]
    codes: torch.Tensor  # [C, n, D]
    log_joint: torch.Tensor  # [C, n]
    values: Optional[Dict[str, torch.Tensor]]  # model values [n, ...], or None (n = 1)
    accepted: List[int]  # chains that moved, per step
    recorded: int  # steps whose statistics are written (or are warmup steps)
    states: List[NamedTuple]  # the chains' state after each step


class DiscreteKernel(HeldInitialParams, MCMCKernel):
    """Base class of the pyro-gwg kernels; works with :class:`pyro.infer.MCMC`.

    Every kernel takes the model first and the options below as keywords; they are
    documented here once, and each kernel documents only its own settings.

    :param callable model: a Pyro model whose latent sites are discrete (or ``None``
        where another object supplies it, e.g. :class:`~pyro_gwg.MixedGibbs`).
    :param jit_compile: how the whole transition (model forward and backward pass,
        proposal, MH) is compiled into one graph (the table
        :data:`~pyro_gwg.compile.modes.JIT_COMPILE`; see :mod:`pyro_gwg.compile`):

        * ``"auto"`` (default): the first step runs the model eagerly; the
          transition is then captured once as a pure graph of ATen operators
          (:func:`~pyro_gwg.compile.backends.capture`), which runs while AOTInductor
          compiles it in a background process (fused C++ or GPU kernels, several
          times faster per step); the chains switch to the compiled package at the
          first step after it is ready, or at once when the on-disk cache holds it
          from an earlier run. Sampling never waits for the compiler. A model whose
          Python control flow depends on latent values runs eagerly, with a warning.
        * ``True``: the captured graph only (no compiler); such a model is an error.
        * ``"inductor"``: AOTInductor before the first step (the chains wait for it),
          through the disk cache; where compilation fails, the captured graph runs,
          with a warning.
        * ``"make_fx"``: TorchInductor through private PyTorch APIs, before the first
          step (no disk cache; faster to compile than AOTInductor, about as fast per
          step).
        * ``False``: eager mode.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy
        (default :func:`~pyro.infer.autoguide.initialization.init_to_sample`).

    Example, with :class:`~pyro_gwg.GWG` (any kernel runs the same way)::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> from pyro.infer import MCMC
        >>> from pyro_gwg import GWG
        >>> def model(y):
        ...     with pyro.plate("sites", 3):
        ...         x = pyro.sample("x", dist.Bernoulli(0.5))
        ...     pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=y)
        >>> pyro.set_rng_seed(0)
        >>> mcmc = MCMC(GWG(model), num_samples=200, warmup_steps=50, disable_progbar=True)
        >>> mcmc.run(torch.tensor(2.0))
        >>> mcmc.get_samples()["x"].shape
        torch.Size([200, 3])

    Per-draw statistics (after warmup) come back from :meth:`diagnostics`:
    ``accepted``, ``accept_prob``, ``num_changed`` (coordinates changed by the
    proposal), ``log_joint`` (of the state after the step) and the evaluation counts
    ``energy_evals`` and ``grad_evals`` (model runs and gradient passes per chain),
    each a tensor with one entry per draw, plus ``acceptance rate`` and an empty
    ``divergences`` list (which ``mcmc.summary()`` and ``arviz.from_pyro`` expect).

    Inside :class:`pyro.infer.MCMC` the kernel holds the state of its run, as Pyro's
    kernels do (:meth:`setup`, :meth:`sample`, :meth:`cleanup`); a caller that batches
    chains this way sets the attribute ``vectorized_chains`` before :meth:`setup`, and
    samples and statistics then carry a leading chain dimension. :class:`pyro_gwg.MCMC`
    instead asks :meth:`start` for a :class:`ChainRun` per block of chains and leaves
    the kernel as it is.

    Warnings about a run (:class:`StuckChainWarning`, gradient-blind ``Categorical``
    sites) come once per cause and run, each listing the sites and chains it concerns:
    the blocks of chains of one run share what they found (:meth:`start`'s ``block``
    and ``report``), and the sequential chains of :class:`pyro.infer.MCMC` are
    recognised as such.
    """

    #: the step evaluates the gradient of the log density (one forward and one
    #: backward pass per step)
    needs_gradient = True
    #: the step evaluates the log density at many states at once (batched)
    evaluates_states = False
    #: Declared trait: whether the transitions leave invariant the density the kernel is
    #: built on (:meth:`build`). ``False`` for a model-specific sampler that reads the
    #: model's arguments instead (:class:`pyro_gwg.contrib.kernels.RBMBlockGibbs`); code
    #: that steps a kernel under a density of its own (the estimators) refuses it.
    targets_bound_density: bool = True
    #: Declared trait: whether the transitions leave the density they sample exactly
    #: invariant (an MH-corrected or Gibbs kernel). ``False`` for an uncorrected
    #: sampler (:class:`~pyro_gwg.kernels.langevin.DULA`), whose stationary law differs
    #: from the target by a bias that its documentation states; the exactness tests
    #: check such a kernel against its own stationary law, and the estimators that
    #: need invariance (AIS, ARM) warn.
    exact: bool = True

    def __init__(
        self,
        model=None,
        *,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy=init_to_sample,
    ) -> None:
        mode_of(jit_compile)  # (refuses any other value)
        self.model = model
        self.jit_compile = jit_compile
        self.max_plate_nesting = max_plate_nesting
        self.init_strategy = init_strategy
        self.transforms: Dict[str, object] = {}
        self.vectorized_chains = 1
        self.energy: Optional[ModelDensity] = None
        self.driver: Optional[ChainDriver] = None
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._run: Optional[ChainRun] = None  # the run of setup, until cleanup
        self._run_report = RunReport()  # what the chains of the last setup found
        self._reset()

    # --------------------------------------------------------------- kernel API
    def __init_subclass__(cls, **kwargs) -> None:
        # every kernel's build checks the input of its algorithm's entry points
        super().__init_subclass__(**kwargs)
        build = cls.__dict__.get("build")
        if build is not None and not getattr(build, "__isabstractmethod__", False):

            @functools.wraps(build)
            def checked_build(self, density, **static) -> Algorithm:
                return checked_algorithm(build(self, density, **static), density.layout)

            cls.build = checked_build

    @abstractmethod
    def build(self, density, **static) -> Algorithm:
        """The kernel's algorithm on ``density`` with the kernel's settings: an
        ``(init, step)`` pair of pure functions (see
        :mod:`pyro_gwg.proposals.algorithm`); ``static`` overrides settings that warmup
        adapts (for example GWG's ``num_flips``). Every subclass's ``build`` returns
        it checked (:func:`~pyro_gwg.driver.checked_algorithm`): ``init`` refuses
        codes that are not ``[num_chains, D]`` states of ``density.layout``, ``step``
        a state of another number of coordinates.

        :param density: a :class:`~pyro_gwg.density.Density`, e.g. a
            :class:`~pyro_gwg.ModelDensity`.
        :rtype: Algorithm
        """

    def adaptation(self, density, num_warmup: int):
        """The warmup adaptation on ``density`` (see :mod:`pyro_gwg.adaptation`), or
        ``None`` when the kernel adapts nothing (the default).

        :param density: the density sampled.
        :param int num_warmup: warmup steps.
        """
        return None

    def _check_density(self, density) -> None:
        """Refuse settings that do not fit the density (default: none); called by
        :meth:`model_density` and :meth:`driver_for`."""

    def driver_for(
        self,
        density,
        num_warmup: int = 0,
        jit_compile: Union[bool, str] = False,
        *,
        on_compile: Optional[Callable[[Optional[str]], None]] = None,
    ) -> ChainDriver:
        """A :class:`~pyro_gwg.driver.ChainDriver` of this kernel on ``density`` (any
        :class:`~pyro_gwg.density.Density`: the model bridge, a tempered density, a
        learnable model, a hand-written potential), with the kernel's adaptation.

        :param density: the density to sample.
        :param int num_warmup: warmup steps (adapted where the kernel adapts).
        :param jit_compile: how the transitions are compiled (a ``jit_compile``
            value; default ``False``, eager: the kernel's own setting is for its model).
        :param callable on_compile: the driver's
            :attr:`~pyro_gwg.driver.ChainDriver.on_compile`.
        :rtype: ChainDriver
        """
        self._check_density(density)
        return ChainDriver(
            self.build,
            density,
            adaptation=self.adaptation(density, num_warmup) if num_warmup > 0 else None,
            num_warmup=num_warmup,
            jit_compile=jit_compile,
            on_compile=on_compile,
        )

    def model_density(
        self,
        model_args: tuple = (),
        model_kwargs: Optional[dict] = None,
        given: Optional[Dict[str, torch.Tensor]] = None,
        given_per_chain: bool = False,
    ):
        """The model's :class:`~pyro_gwg.ModelDensity` for these arguments, with the
        kernel's settings (``max_plate_nesting``, ``init_strategy``, ...), checked
        against them.

        :param tuple model_args: the model's positional arguments.
        :param dict model_kwargs: its keyword arguments.
        :param dict given: ``{site: value}`` of sites to condition the model on (the
            energy's ``given``), or ``None``.
        :param bool given_per_chain: the ``given`` values carry a leading chain
            dimension (the energy's ``given_per_chain``).
        :rtype: ModelDensity
        :raises UnsupportedModelError: for a kernel without a model, a model with
            nothing to sample, or one the kernel's settings do not fit.
        """
        if self.model is None:
            raise UnsupportedModelError(
                "{} needs a model: {}(model).".format(type(self).__name__, type(self).__name__)
            )
        energy = ModelDensity(
            self.model,
            model_args,
            model_kwargs,
            max_plate_nesting=self.max_plate_nesting,
            jit_compile=bool(self.jit_compile),
            given=given,
            given_per_chain=given_per_chain,
            init_strategy=self.init_strategy,
        )
        if not bool((energy.layout.num_values() > 1).any()):
            raise UnsupportedModelError(
                "Every latent discrete site of the model has a single possible value; "
                "there is nothing to sample."
            )
        self._check_density(energy)
        return energy

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
        given: Optional[Dict[str, torch.Tensor]] = None,
    ) -> ChainRun:
        """Start ``num_chains`` chains on the model: a :class:`ChainRun` holding the
        model's density (:meth:`model_density`) and a chain driver at the initial
        states. The kernel itself is left as it is (:class:`pyro_gwg.MCMC` runs its
        chains this way).

        :param int warmup_steps: warmup steps (adapted where the kernel adapts).
        :param tuple model_args: the model's positional arguments.
        :param dict model_kwargs: its keyword arguments.
        :param int num_chains: chains, as a leading batch dimension.
        :param dict initial_params: initial model values ``{site: [num_chains, ...]}``
            (for one chain also without the chain dimension); ``None``: from the
            kernel's ``init_strategy``.
        :param callable on_compile: told when a compilation starts and ends (see
            :attr:`~pyro_gwg.driver.ChainDriver.on_compile`).
        :param tuple block: ``(block, number of blocks, first chain)`` where the run's
            chains go in blocks, each started on its own.
        :param report: the ``report`` of the previous block's :class:`ChainRun` (what
            the run found so far; ``None`` for the first block).
        :param dict given: ``{site: value}`` of sites to condition the model on (see
            :meth:`setup_given`), or ``None``; with several chains, one value per chain
            ``[num_chains, *shape]``, each chain's states evaluated under its own (see
            :class:`~pyro_gwg.ModelDensity`'s ``given_per_chain``).
        :rtype: ChainRun
        """
        warmup_steps = check_integer("warmup_steps", warmup_steps, 0)
        energy = self.model_density(model_args, model_kwargs, given, num_chains > 1)
        report = RunReport() if report is None else report
        # the blocks of chains of a run share the model: the first chose its batching
        # (with its warning)
        energy.batching = report.batching
        if initial_params is not None:
            if num_chains == 1:  # one chain's values may come without their chain dim
                initial_params = energy.with_chain_dim(initial_params)
            codes = energy.codes_from_values(initial_params, "Initial value")
            if codes.shape[0] != num_chains:
                raise ValueError(
                    "initial_params hold {} state(s) but {} chain(s) are run; give one "
                    "initial value per chain (a leading dimension of size {}).".format(
                        codes.shape[0], num_chains, num_chains
                    )
                )
            energy.check_initial(codes)
        else:
            codes = energy.initial_codes(num_chains)
        if self.evaluates_states and energy.batching is None:
            # even one chain's step evaluates many states
            energy.choose_batching(codes)
        if self.needs_gradient:  # (the proposal of a gradient-free kernel sees no gradient)
            energy.warn_gradient_blind_categoricals(codes[:1], report.categoricals)
        mode = self.jit_compile
        # (an earlier block of the run found that it does not compile, and said so)
        if mode and (report.eager or not self._traceable(energy, codes)):
            report.eager = True
            energy.jit_compile = mode = False
        driver = self.driver_for(energy, warmup_steps, mode, on_compile=on_compile)
        driver.init(codes)
        return ChainRun(self, energy, driver, report, block)

    # --------------------------------------------------------------- Pyro interface
    def _reset(self) -> None:
        self.driver = None
        self._params: Optional[Dict[str, torch.Tensor]] = None
        self._phase_accepted = 0
        self._phase_draws = 0
        self._draw_stats: Dict[str, torch.Tensor] = {}  # [capacity, C] rows (see _record)
        self._num_recorded = 0
        self._ahead: Optional[_Block] = None  # the block the draws are served from
        self._next = 0  # its next draw
        self._ahead_size = 1
        self._served = 0  # draws served since setup

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        self.setup_given(warmup_steps, None, *args, **kwargs)

    def setup_given(
        self, warmup_steps: int, given: Optional[Dict[str, torch.Tensor]], *args, **kwargs
    ) -> None:
        """:meth:`setup`, with the model conditioned on ``given`` (as
        :class:`~pyro_gwg.MixedGibbs` conditions it on its continuous sites): each
        :meth:`sample` then takes their current values in its ``params``, beside the
        state.

        :param int warmup_steps: warmup steps.
        :param dict given: ``{site: value}`` of the sites to condition on, or ``None``
            (with ``vectorized_chains`` chains, one value per chain: see :meth:`start`).
        """
        self._reset()
        block = _trace.pyro_sequential_chain() or (0, 1, 0)
        self._run = run = self.start(
            warmup_steps,
            args,
            kwargs,
            num_chains=self.vectorized_chains,
            initial_params=self._initial_params,
            block=block,
            report=self._run_report if block[0] > 0 else None,
            given=given,
        )
        self._run_report = run.report
        self.energy, self.driver = run.energy, run.driver
        self._params = self._params_from_codes(run.state.codes)
        self._initial_params = self._params

    def _traceable(self, energy: ModelDensity, codes: torch.Tensor) -> bool:
        """Capture the energy and check it against the eager model (see
        :meth:`ModelDensity.value_and_grad <pyro_gwg.ModelDensity.value_and_grad>`);
        with ``jit_compile="auto"`` only refuse what no capture can follow (the
        transition's capture is checked against the eager transition instead, see
        :class:`~pyro_gwg.compile.transition.BackgroundTransition`: no capture delays
        the first draw), and a model that fails runs eagerly (``False``)."""
        try:
            if self.jit_compile == "auto":
                energy.check_capturable()
                energy.jit_compile = False  # (the energy on its own stays eager)
            else:
                energy.value_and_grad(codes)
        except (UnsupportedModelError, RuntimeError) as error:
            if self.jit_compile != "auto":
                raise
            warn(
                "{} Running {} eagerly.".format(error, type(self).__name__),
                CompilationWarning,
            )
            energy.jit_compile = False
            return False
        return True

    def sample(self, params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """One draw of Pyro's MCMC protocol: the transition :class:`pyro_gwg.MCMC
        <pyro_gwg.mcmc.MCMC>` runs (and its package in the disk cache), from ``params``.

        A kernel that conditions on nothing (no ``given`` sites) and is not adapting
        runs its transitions in blocks, served one draw per call: 1, 2, 4, ... up to
        :data:`~pyro_gwg.driver.UNOBSERVED_STEPS` steps as the calls continue the chain
        (so that a run of ``n`` draws computes fewer than ``2n`` steps), the model
        values decoded and the statistics recorded once per block. The blocks call the
        same one-step function in the same order, so the draws are those of single
        steps; steps computed ahead are dropped when the caller restarts the chain
        from other values.
        """
        driver = self.driver
        given = self.energy.given_names
        if given:  # the values the model is conditioned on (see setup_given)
            self.energy.set_given({name: params[name] for name in given})
        if not self._current(params):  # the caller changed the state: start from it
            self._drop_ahead()
            own = {name: params[name] for name in self._param_names}
            driver.init(self.energy.codes_from_values(self._with_chain_dim(own)))
        elif given:
            self.refresh()  # the same state, whose log density changed
        block = self._ahead
        if block is None or self._next == len(block.accepted):
            block = self._run_ahead(given)
        i = self._next
        self._next += 1
        self._served += 1
        if self._served == driver.num_warmup + 1:  # first draw after warmup: count afresh
            self._phase_accepted = self._phase_draws = 0
        accepted = block.accepted[i]
        self._phase_accepted += accepted
        self._phase_draws += self.vectorized_chains
        if accepted:
            if block.values is None:  # (a single step: decoded only when it moved)
                self._params = self._params_from_codes(block.codes[:, i])
            else:
                self._params = {k: v[i] for k, v in block.values.items()}
        return self._params

    def _current(self, params: Dict[str, torch.Tensor]) -> bool:
        """Whether ``params`` hold the values of the last draw (the same tensors)."""
        mine = self._params
        return params is mine or all(params.get(name) is value for name, value in mine.items())

    def _run_ahead(self, given) -> _Block:
        """The next block of transitions (see :meth:`sample`), after the statistics of
        the last one are recorded."""
        self._record_served()
        driver = self.driver
        adapting = driver.adaptation is not None and driver.warming_up
        size = 1 if given or adapting else self._ahead_size
        self._ahead_size = min(2 * size, UNOBSERVED_STEPS)
        if size == 1:
            info, codes, log_joint = driver.step_block()
            states, values = [driver.state], None
        else:
            blocks, states = [], []
            driver.run(size, lambda t, *block: blocks.append(block), every=size, states=states)
            if len(blocks) > 1:  # (a block ends with warmup)
                info = type(blocks[0][0])(*(torch.cat(f, 1) for f in zip(*(b[0] for b in blocks))))
                codes, log_joint = (torch.cat([b[k] for b in blocks], 1) for k in (1, 2))
            else:
                info, codes, log_joint = blocks[0]
            draws = codes.shape[1]
            values = self._params_from_codes(codes.transpose(0, 1).flatten(0, 1), draws)
        accepted = info.accepted.sum(0).tolist()
        warmup_rows = min(max(driver.num_warmup - self._served, 0), len(accepted))
        self._ahead = _Block(info, codes, log_joint, values, accepted, warmup_rows, states)
        self._next = 0
        return self._ahead

    def _drop_ahead(self) -> None:
        """Forget the transitions computed ahead of the draws served: the chain goes
        on from the state and the step counter of the last draw."""
        block = self._ahead
        if block is not None:
            self._record_served()
            self.driver.t -= len(block.accepted) - self._next
            self.driver.state = self.state
            self._ahead = None
        self._ahead_size = 1

    def logging(self) -> Dict[str, str]:
        rate = self._phase_accepted / max(self._phase_draws, 1)
        return {"acc. rate": "{:.3f}".format(rate)}

    def diagnostics(self) -> Dict[str, object]:
        stats: Dict[str, object] = {"divergences": []}
        self._record_served()
        draws = {k: v[: self._num_recorded] for k, v in self._draw_stats.items()}
        if self.vectorized_chains == 1:
            draws = {k: v.squeeze(-1) for k, v in draws.items()}
        if "accepted" in draws:
            stats["acceptance rate"] = float(draws["accepted"].float().mean())
        stats.update(draws)
        return stats

    def cleanup(self) -> None:
        run, self._run = self._run, None
        if run is not None:  # (pyro.infer.MCMC calls cleanup twice per chain)
            run.finish()
        self._initial_params = None
        self._reset()

    def __getstate__(self):
        # a kernel run by pyro.infer.MCMC in this process keeps the density of that run,
        # whose traces and compiled functions do not pickle; setup() builds another
        return dict(self.__dict__, energy=None, driver=None, _run=None)

    def _stuck_advice(self) -> str:
        """Kernel-specific advice appended to the stuck-chain warning."""
        return ""

    # --------------------------------------------------------------- state
    @property
    def params(self) -> Optional[Dict[str, torch.Tensor]]:
        """The model values last returned by :meth:`sample` (the current state)."""
        return self._params

    def refresh(self) -> None:
        """Re-evaluate the current state, after the model changed under it (for example
        when another kernel moved the sites this kernel conditions on)."""
        self._drop_ahead()
        self.driver.init(self.driver.state.codes)

    def current_values(self) -> Dict[str, torch.Tensor]:
        """Model values of the current state of every chain, ``[C, ...]``, as
        :meth:`pyro_gwg.MCMC.get_samples <pyro_gwg.mcmc.MCMC.get_samples>` gives draws:
        ``Categorical`` sites as ``long`` indices, the others as floats."""
        return self.energy.values_from_codes(self.state.codes)

    @property
    def state(self) -> Optional[NamedTuple]:
        """Current batched kernel state (``codes [C, D]``, ``log_joint [C]``, ...): that
        of the last draw :meth:`sample` returned (the driver may have computed steps
        ahead of it, see :meth:`sample`)."""
        block = self._ahead
        if block is not None and self._next > 0:
            return block.states[self._next - 1]
        return self.driver.state if self.driver is not None else None

    # --------------------------------------------------------------- helpers
    def _record_served(self) -> None:
        """Write the statistics of the draws after warmup served from the current block
        and not yet written into one ``[capacity, C]`` tensor per statistic (grown
        geometrically)."""
        block = self._ahead
        if block is None or self._next <= block.recorded:
            return
        first, last = block.recorded, self._next
        self._ahead = block._replace(recorded=last)
        row, n = self._num_recorded, last - first
        fields = dict(block.info._asdict(), log_joint=block.log_joint)
        for name, values in fields.items():
            rows = values[:, first:last].detach().transpose(0, 1)
            buffer = self._draw_stats.get(name)
            if buffer is None or row + n > buffer.shape[0]:
                grown = rows.new_empty((max(64, 2 * (row + n)),) + tuple(rows.shape[1:]))
                if buffer is not None:
                    grown[:row] = buffer[:row]
                buffer = self._draw_stats[name] = grown
            buffer[row : row + n] = rows
        self._num_recorded = row + n

    def _with_chain_dim(self, values: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        if self.vectorized_chains > 1:
            return values
        return self.energy.with_chain_dim(values)

    @property
    def _param_names(self) -> List[str]:
        return [site.name for site in self.energy.sites]

    def _params_from_codes(self, codes: torch.Tensor, draws: int = 0) -> Dict[str, torch.Tensor]:
        """Model values of ``codes`` (``[C, D]``; with ``draws``, ``[draws * C, D]``,
        the values then ``[draws, ...]``), as :meth:`sample` returns them."""
        # float values: pyro.infer.MCMC concatenates samples of all sites
        dtype = torch.get_default_dtype()
        values = self.energy.values_from_codes(codes)
        chains = self.vectorized_chains
        if draws:
            values = {k: v.reshape((draws, chains) + v.shape[1:]) for k, v in values.items()}
        if chains == 1:
            values = {k: v.select(int(bool(draws)), 0) for k, v in values.items()}
        return {k: v if v.dtype == dtype else v.to(dtype) for k, v in values.items()}

r"""``Auto``: a kernel built from the model alone, choosing the move of every site.

:class:`Auto` makes a :class:`~pyro_gwg.auto.plan.Plan` from a trace of the model
(:func:`~pyro_gwg.auto.plan.make_plan`) and runs the kernel the plan calls for:

=====================================  ============================================
the plan                               the kernel run
=====================================  ============================================
every latent site summed out           :class:`~pyro_gwg.auto.exact.ExactDraws`
                                       (independent exact draws)
discrete sites sampled, none           the discrete kernel of the plan (``Gibbs``,
continuous                             ``GWG``, ...) on the model with the summed-out
                                       sites enumerated
continuous sites, none discrete        Pyro's :class:`~pyro.infer.NUTS` on the model
sampled                                with the discrete sites enumerated
continuous and discrete sites          :class:`~pyro_gwg.MixedGibbs` of NUTS and the
sampled                                discrete kernel
=====================================  ============================================

Each kernel is exact, so :class:`Auto` is: summing a site out leaves the marginal of
the other sites unchanged, and the summed-out sites are drawn afterwards from their
exact conditional given each draw (``draw_enumerated``, as
:func:`pyro.infer.infer_discrete` does).
"""

from __future__ import annotations

import inspect
from typing import Callable, Dict, Mapping, Optional, Union

import torch
from pyro.infer import NUTS
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_gwg import _trace
from pyro_gwg._validation import check_bool, check_integer
from pyro_gwg.auto.exact import ExactDraws
from pyro_gwg.auto.plan import DEFAULT_BUDGET, Plan, make_plan, value_batch_shape
from pyro_gwg.auto.sweep import Sweep
from pyro_gwg.compile.modes import mode_of
from pyro_gwg.enumeration import (
    broadcasts,
    draw_enumerated,
    draw_enumerated_batch,
    with_enumeration,
)
from pyro_gwg.kernels import REGISTRY
from pyro_gwg.kernels.base import DiscreteKernel, HeldInitialParams
from pyro_gwg.kernels.mixed import MixedGibbs

__all__ = ["Auto"]

#: settings of the discrete kernels Auto chooses (beyond the shared options)
_KERNEL_SETTINGS = {"GWG": {"num_flips": "auto"}}


def _fixed_settings(kernel_class) -> dict:
    """Settings that keep a kernel of a :class:`~pyro_gwg.auto.sweep.Sweep` from
    adapting (a sweep runs no warmup adaptation)."""
    parameters = inspect.signature(kernel_class.__init__).parameters
    return {"adapt_step_size": False} if "adapt_step_size" in parameters else {}


class Auto(HeldInitialParams, MCMCKernel):
    r"""Choose the move of every latent site from the model, and run them; a
    :class:`~pyro.infer.mcmc.mcmc_kernel.MCMCKernel` for :class:`pyro.infer.MCMC` and
    :class:`pyro_gwg.MCMC`.

    The plan (:mod:`pyro_gwg.auto.plan`), made when the run starts from a trace of the
    model at its arguments:

    * a discrete site is **summed out** when Pyro can enumerate it exactly (its
      plates are conditionally independent, which the plan checks by probing the
      model) and the largest enumerated tensor stays within ``budget`` elements;
      every ``infer={"enumerate": "parallel"}`` mark of the model is kept;
    * other index (``Categorical``) and ordinal sites get exact **Gibbs** updates;
    * other binary and one-hot sites get **GWG** (``num_flips="auto"``) when the model
      samples at least 4 such coordinates, else Gibbs; sites given different kernels
      are updated in turn (:class:`~pyro_gwg.auto.sweep.Sweep`);
    * continuous sites get **NUTS**, alternating with the discrete kernel as in
      :class:`~pyro_gwg.MixedGibbs`.

    ``print(kernel)`` shows the plan after a run (or call :meth:`plan` with the
    model's arguments first); ``sites`` overrides any choice.

    :param callable model: a Pyro model.
    :param dict sites: per-site overrides ``{site: move}``: ``"enumerate"``, ``"NUTS"``
        (continuous sites) or the name of a pyro-gwg kernel (``"Gibbs"``, ``"GWG"``,
        ``"NCG"``, ``"PAVG"``, ``"HammingBall"``, ...). Sites given different kernels
        are updated in turn (:class:`~pyro_gwg.auto.sweep.Sweep`, with fixed
        settings: no warmup adaptation, run eagerly).
    :param int budget: largest enumerated tensor, in elements (default ``2 ** 20``).
    :param bool draw_enumerated: draw the summed-out sites for every draw, so that
        ``get_samples()`` holds them (default ``True``).
    :param dict nuts_options: keyword arguments of :class:`~pyro.infer.NUTS`.
    :param jit_compile: of the discrete kernel (see :class:`~pyro_gwg.DiscreteKernel`).
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.
    :param callable init_strategy: Pyro per-site initialisation strategy.

    Example::

        >>> import pyro, torch
        >>> import pyro.distributions as dist
        >>> def model(y):
        ...     loc = pyro.sample("loc", dist.Normal(0.0, 5.0))
        ...     with pyro.plate("data", len(y)):
        ...         z = pyro.sample("z", dist.Bernoulli(0.5))
        ...         pyro.sample("y", dist.Normal(loc * z, 1.0), obs=y)
        >>> y = torch.tensor([0.1, 2.9, 3.2])
        >>> kernel = Auto(model)
        >>> print(kernel.plan(y))  # doctest: +NORMALIZE_WHITESPACE
        site  kind        size  move       why
        loc   continuous  1     NUTS       continuous
        z     binary      3     enumerate  summed out; largest tensor 6
        enumeration: largest tensor 6 elements (budget 1,048,576)
    """

    def __init__(
        self,
        model: Callable,
        *,
        sites: Optional[Mapping[str, str]] = None,
        budget: int = DEFAULT_BUDGET,
        draw_enumerated: bool = True,
        nuts_options: Optional[Mapping[str, object]] = None,
        jit_compile: Union[bool, str] = "auto",
        max_plate_nesting: Optional[int] = None,
        init_strategy: Callable = init_to_sample,
    ) -> None:
        if not callable(model):
            raise TypeError("Auto: model must be a callable Pyro model, got {!r}".format(model))
        if sites is not None and not (
            isinstance(sites, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in sites.items())
        ):
            raise TypeError(
                "Auto: sites must be a dict {{site name: move}} of strings, got {!r}".format(sites)
            )
        if nuts_options is not None and not isinstance(nuts_options, Mapping):
            raise TypeError(
                "Auto: nuts_options must be a dict of NUTS keyword arguments, got {!r}".format(
                    nuts_options
                )
            )
        mode_of(jit_compile)  # (refuses any other value)
        if max_plate_nesting is not None:
            max_plate_nesting = check_integer("max_plate_nesting", max_plate_nesting, 0)
        self.model = model
        self.sites = dict(sites or {})
        self.budget = check_integer("budget", budget, 1, "elements of an enumerated tensor")
        self.draw_enumerated = check_bool("draw_enumerated", draw_enumerated)
        self.nuts_options = dict(nuts_options or {})
        self.jit_compile = jit_compile
        self.max_plate_nesting = max_plate_nesting
        self.init_strategy = init_strategy
        self._planned: Optional[tuple] = None  # (args, kwargs, plan, kernel)
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._args: tuple = ()
        self._kwargs: dict = {}

    # ------------------------------------------------------------------ the plan
    def plan(self, *args, **kwargs) -> Plan:
        """The plan for the model at these arguments (see :mod:`pyro_gwg.auto.plan`).

        :rtype: ~pyro_gwg.auto.plan.Plan
        """
        return self._plan_for(args, kwargs)[0]

    @property
    def kernel(self) -> Optional[MCMCKernel]:
        """The kernel the last plan runs (``None`` before a plan is made)."""
        return None if self._planned is None else self._planned[3]

    def _plan_for(self, args: tuple, kwargs: dict):
        """``(plan, kernel)`` for these arguments, made once per arguments."""
        planned = self._planned
        if (
            planned is not None
            and len(planned[0]) == len(args)
            and all(a is b for a, b in zip(planned[0], args))
            and planned[1].keys() == kwargs.keys()
            and all(planned[1][k] is v for k, v in kwargs.items())
        ):
            return planned[2], planned[3]
        trace = _trace.trace_model(self.model, args, kwargs)
        plate_nesting = _trace.check_max_plate_nesting(trace, self.max_plate_nesting)
        plan = make_plan(
            self.model,
            args,
            kwargs,
            sites=self.sites,
            budget=self.budget,
            max_plate_nesting=plate_nesting,
            init_strategy=self.init_strategy,
            kernels=REGISTRY,
        )
        kernel = self._kernel_for(plan, plate_nesting)
        self._planned = (args, dict(kwargs), plan, kernel)
        self._plate_nesting = plate_nesting
        return plan, kernel

    def _kernel_for(self, plan: Plan, plate_nesting: int) -> MCMCKernel:
        """The kernel that runs ``plan``."""
        moves = plan.discrete_moves
        options = dict(max_plate_nesting=plate_nesting, init_strategy=self.init_strategy)
        enumerated_model = with_enumeration(self.model, plan.enumerated)
        if not plan.continuous and not moves:
            return ExactDraws(with_enumeration(self.model, ()), **options)
        model = None if plan.continuous else enumerated_model
        discrete: Optional[DiscreteKernel] = None
        if len(moves) == 1:
            (name,) = moves
            settings = _KERNEL_SETTINGS.get(name, {})
            discrete = REGISTRY[name](model, jit_compile=self.jit_compile, **options, **settings)
        elif moves:  # a sweep of kernels with fixed settings, one per group of sites
            kernels = {}
            for name, sites in moves.items():
                kernel = REGISTRY[name](jit_compile=False, **_fixed_settings(REGISTRY[name]))
                kernels.update({site: kernel for site in sites})
            discrete = Sweep(model, kernels, **options)
        if not plan.continuous:
            return discrete
        nuts = NUTS(
            enumerated_model,
            max_plate_nesting=plate_nesting,
            jit_compile=False,
            **{"init_strategy": self.init_strategy, **self.nuts_options},
        )
        return nuts if discrete is None else MixedGibbs(nuts, discrete)

    def __repr__(self) -> str:
        name = getattr(self.model, "__name__", type(self.model).__name__)
        if self._planned is None:
            return "Auto({}): no plan yet (made at the start of a run, or by .plan(*args))".format(
                name
            )
        return "Auto({}), running {}:\n{}".format(
            name, type(self._planned[3]).__name__, self._planned[2]
        )

    # ------------------------------------------------------------------ pyro_gwg.MCMC
    def enumerated_draws(
        self, values: Mapping[str, torch.Tensor], args: tuple, kwargs: dict
    ) -> Dict[str, torch.Tensor]:
        """A draw of the summed-out sites given each draw of a run of the planned kernel
        (when ``draw_enumerated``; else nothing): :class:`pyro_gwg.MCMC` adds them to
        its draws.

        :param dict values: the run's draws ``{site: [C, T, ...]}``.
        :param tuple args: the model's positional arguments.
        :param dict kwargs: its keyword arguments.
        :returns: ``{site: [C, T, ...]}`` of the summed-out sites.
        :rtype: dict
        """
        plan, kernel = self._plan_for(args, kwargs)
        if not (self.draw_enumerated and plan.enumerated) or isinstance(kernel, ExactDraws):
            return {}
        num_chains, num_draws = next(iter(values.values())).shape[:2]
        size = num_chains * num_draws
        flat = {k: v.reshape((size,) + v.shape[2:]) for k, v in values.items()}
        trace = _trace.trace_model(self.model, args, kwargs)
        shapes = {
            site["name"]: (value_batch_shape(site), site["fn"].event_shape)
            for site in _trace.sample_sites(trace, "latent")
        }
        model = with_enumeration(self.model, plan.enumerated)
        batched = broadcasts(model, flat, shapes, args, kwargs, self._plate_nesting)
        drawn = draw_enumerated_batch(
            model, flat, size, shapes, args, kwargs, self._plate_nesting, batched
        )
        return {k: v.reshape((num_chains, num_draws) + v.shape[1:]) for k, v in drawn.items()}

    # ------------------------------------------------------------------ pyro.infer.MCMC
    @property
    def transforms(self):
        return getattr(self.kernel, "transforms", None) or {}

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        plan, kernel = self._plan_for(args, kwargs)
        self._args, self._kwargs = args, kwargs
        given = self._initial_params
        if given is not None:
            kernel.initial_params = {k: v for k, v in given.items() if k not in plan.enumerated}
        kernel.setup(warmup_steps, *args, **kwargs)
        self._initial_params = self._with_enumerated(plan, kernel, kernel.initial_params)

    def sample(self, params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        plan, kernel = self._planned[2], self._planned[3]
        if isinstance(kernel, ExactDraws):
            return kernel.sample(params)
        own = {k: v for k, v in params.items() if k not in plan.enumerated}
        return self._with_enumerated(plan, kernel, kernel.sample(own))

    def _with_enumerated(self, plan: Plan, kernel, params: Dict[str, torch.Tensor]):
        """``params`` with a draw of the summed-out sites given them (when asked)."""
        if not (self.draw_enumerated and plan.enumerated) or isinstance(kernel, ExactDraws):
            return params
        transforms = self.transforms
        values = {n: transforms[n].inv(v) if n in transforms else v for n, v in params.items()}
        drawn = draw_enumerated(
            with_enumeration(self.model, plan.enumerated),
            values,
            self._args,
            self._kwargs,
            self._plate_nesting,
        )
        return {**params, **drawn}

    def logging(self):
        return self.kernel.logging()

    def diagnostics(self):
        return self.kernel.diagnostics()

    def end_warmup(self) -> None:
        self.kernel.end_warmup()

    def cleanup(self) -> None:
        if self.kernel is not None:
            self.kernel.cleanup()
        self._initial_params = None

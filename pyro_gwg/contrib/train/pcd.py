r"""Persistent contrastive divergence: the learner :class:`PCD`, with any pyro-gwg kernel
on batched persistent chains, sharded over the ranks of a :mod:`torch.distributed`
process group after :meth:`PCD.distribute`.
"""

from __future__ import annotations

import collections
import contextlib
import functools
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Union

import pyro
import pyro.poutine as poutine
import torch
import torch.distributed as dist

from pyro_gwg._validation import check_integer, check_number
from pyro_gwg.adaptation import ChainRecord, fit_records
from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.contrib.estimators.ais import FactorisedBase
from pyro_gwg.contrib.estimators.driver import (
    TemperedDensity,
    bind_kernel,
    check_kernel,
    run_kernel,
)
from pyro_gwg.contrib.train.objectives import (
    ema_update,
    energy_regulariser,
    group_l1_penalty,
    l1_penalty,
    pcd_objective,
    warmup_factor,
)
from pyro_gwg.driver import ChainDriver
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.kernels.ncg import PAVG
from pyro_gwg.proposals.algorithm import Algorithm
from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.ncg import PreconditionerFit
from pyro_gwg.proposals.ncg import preconditioner as eigendecomposition

__all__ = ["PCD"]

PENALTIES = ("l1", "group_l1")
INITS = ("uniform", "data", "data_mean")
#: ``PCD(preconditioner=CHAINS)``: PAVG's preconditioner fitted to the persistent chains
CHAINS = "chains"


class PCD:
    r"""Persistent contrastive divergence for the ``pyro.param`` parameters of a
    discrete energy-based Pyro model, with any pyro-gwg kernel on batched persistent
    chains.

    Each :meth:`step` (i) takes ``num_chains`` chain states (the persistent chains, or
    a draw from the replay buffer, each reset with probability ``reinit_prob`` to a
    draw of the initial distribution), (ii) runs ``mcmc_steps`` kernel transitions on
    them under the current parameters, and (iii) takes one optimiser step, at the
    warmed-up learning rate, on

    .. math:: \overline{f_\theta(x')} - \overline{f_\theta(x)} + \lambda\,\Omega(\theta)
              + \alpha \big(\overline{f_\theta(x)^2} + \overline{f_\theta(x')^2}\big)

    (:func:`.pcd_objective`, the penalty, and ``energy_reg`` :math:`\alpha` times
    :func:`.energy_regulariser`), then updates the moving average of the parameters
    (:func:`.ema_update`). The parameter store is shared with Pyro: clear it
    (``pyro.clear_param_store()``) before learning a new model.

    After :meth:`distribute` the chains and each batch are sharded over the ranks of a
    :mod:`torch.distributed` process group: ``num_chains``, ``buffer_size`` and the
    batch size are totals over the ranks, each rank holding an equal share.

    :param callable model: a Pyro model with ``pyro.param``/``pyro.module`` parameters
        whose latent discrete sites are the data (observed sites, if any, are held
        at their values); it must broadcast over a leading batch dimension.
    :param DiscreteKernel kernel: the chains' transition (``GWG()``, ``Gibbs()``,
        ...; its own model, if any, is ignored; no warmup adaptation).
    :param int num_chains: chains updated per step (and the persistent chains when no
        buffer is used).
    :param int mcmc_steps: kernel transitions per step.
    :param float lr: (base) learning rate.
    :param optimizer: a :class:`torch.optim.Optimizer` class (default Adam, as in
        the paper).
    :param dict penalty: ``{param name: strength}`` of the penalty :math:`\lambda`.
    :param str penalty_kind: ``"l1"`` or ``"group_l1"`` (Eq. 34).
    :param int group_dims: trailing dimensions of one group for ``"group_l1"``.
    :param int buffer_size: replay buffer size (``None``: plain persistent chains).
    :param float reinit_prob: probability that a drawn chain restarts from the initial
        distribution (a random data point of the batch for ``init="data"``).
    :param init: initial chain (or buffer) states: ``"uniform"`` (noise), ``"data"``
        (random data points of the first batch), ``"data_mean"`` (the factorised
        Bernoulli / categorical distribution of the data marginals, the buffer
        initialisation of Grathwohl et al. 2021 [Grathwohl2021]_ for deep EBMs:
        :meth:`FactorisedBase.fit <pyro_gwg.contrib.estimators.ais.FactorisedBase.fit>`
        on all of :meth:`fit`'s data, or on the first batch given to :meth:`step`), or
        a :class:`~pyro_gwg.contrib.estimators.ais.FactorisedBase` of the model's
        coordinates to draw from.
    :param float ema: decay :math:`\delta \in [0, 1)` of an exponential moving average
        of the parameters kept beside them (:func:`.ema_update`; the paper uses 0.999),
        read with :meth:`ema_params` or swapped in with :meth:`use_ema`; ``None``: none.
    :param int warmup_iterations: updates of the linear learning-rate warm-up
        (:func:`.warmup_factor`, through :class:`torch.optim.lr_scheduler.LambdaLR`, so
        with any optimiser); 0: none.
    :param float energy_reg: strength :math:`\alpha \ge 0` of
        :func:`.energy_regulariser`.
    :param preconditioner: for a :class:`~pyro_gwg.PAVG` kernel, its ``[R, R]``
        preconditioner :attr:`preconditioner_matrix`, the matrix of the chains' PAVG
        transitions (the kernel object is left as built), refreshed before the chains
        move in updates ``refresh_every``, ``2 refresh_every``, ... so that it follows
        the parameters being learned. Either

        * model-specific: a function of no arguments returning the matrix under the
          current parameters (e.g. ``lambda:
          ising_preconditioner(symmetric_couplings(pyro.param("couplings")))``, the
          Hessian: PAVG is then block Gibbs), evaluated (without gradient) in update 0
          too, and checked once here (Rhodes & Gutmann 2022 [Rhodes2022]_, Section 5.3,
          "model-specific");
        * ``"chains"``: model-agnostic, fitted to the persistent chains as PAVG's warmup
          fits it (:func:`~pyro_gwg.proposals.ncg.fit_preconditioner`: the scaled
          empirical covariance or precision of the relaxed states): each update records
          the states, gradients and log joints of its chains before and after each of
          their ``mcmc_steps`` transitions, and each refresh fits ``M`` to the records
          of the last ``preconditioner_window`` updates, the scale fitted within each
          update (under one parameter value). Update 0 runs with the kernel's own
          ``preconditioner`` (``M = 0``, AVG, if it has none), and a refresh that finds
          fewer than two moves in its window keeps the matrix in force (Rhodes &
          Gutmann 2022, Section 5.3, "model-agnostic"; their released code runs it in
          PCD with one fit from the chains of the first updates, here it is refitted
          as learning proceeds). The fit is :attr:`preconditioner_fit`.

        Either way the chains move under one fixed matrix within an update, so each of
        their transitions leaves the model at the current parameters invariant (exact
        PAVG); the matrix changes only between updates, as the parameters do.
    :param int refresh_every: updates between two refreshes of the preconditioner.
    :param int preconditioner_window: for ``preconditioner="chains"``: updates whose
        chain records each fit pools (default 10; it holds ``window x (mcmc_steps + 1)
        x num_chains`` relaxed states and gradients).
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.

    Example::

        >>> import pyro, torch
        >>> from pyro_gwg import GWG
        >>> from pyro_gwg.contrib.train import learnable_ising
        >>> pyro.clear_param_store()
        >>> pcd = PCD(learnable_ising, GWG(), num_chains=16, mcmc_steps=5, lr=0.05,
        ...           model_args=(4,))
        >>> data = {"x": torch.ones(32, 4)}
        >>> history = pcd.fit(data, num_iterations=3, batch_size=8)
        >>> len(history)
        3
    """

    def __init__(
        self,
        model,
        kernel: DiscreteKernel,
        *,
        num_chains: int = 256,
        mcmc_steps: int = 50,
        lr: float = 1e-3,
        optimizer: Callable = torch.optim.Adam,
        penalty: Optional[Dict[str, float]] = None,
        penalty_kind: str = "l1",
        group_dims: int = 2,
        buffer_size: Optional[int] = None,
        reinit_prob: float = 0.0,
        init: Union[str, FactorisedBase] = "uniform",
        ema: Optional[float] = None,
        warmup_iterations: int = 0,
        energy_reg: float = 0.0,
        preconditioner: Union[None, str, Callable[[], torch.Tensor]] = None,
        refresh_every: int = 1,
        preconditioner_window: Optional[int] = None,
        model_args: tuple = (),
        model_kwargs: Optional[dict] = None,
        max_plate_nesting: Optional[int] = None,
    ) -> None:
        check_kernel(kernel, "PCD")
        if int(num_chains) != num_chains or num_chains < 1:
            raise ValueError("num_chains must be a positive integer, got {}".format(num_chains))
        if int(mcmc_steps) != mcmc_steps or mcmc_steps < 0:
            raise ValueError("mcmc_steps must be a non-negative integer, got {}".format(mcmc_steps))
        if penalty_kind not in PENALTIES:
            raise ValueError(
                "penalty_kind must be one of {}, got {!r}".format(PENALTIES, penalty_kind)
            )
        if not isinstance(init, FactorisedBase) and init not in INITS:
            raise ValueError(
                "init must be one of {} or a FactorisedBase, got {!r}".format(INITS, init)
            )
        if buffer_size is not None and (
            int(buffer_size) != buffer_size or buffer_size < num_chains
        ):
            raise ValueError(
                "buffer_size must be an integer >= num_chains ({}), got {}".format(
                    num_chains, buffer_size
                )
            )
        if not 0 <= reinit_prob <= 1:
            raise ValueError("reinit_prob must lie in [0, 1], got {}".format(reinit_prob))
        if ema is not None:
            ema = check_number("ema", ema, 0.0, 1.0, high_open=True)
        warmup_iterations = check_integer("warmup_iterations", warmup_iterations, 0, "updates")
        energy_reg = check_number("energy_reg", energy_reg, 0.0, high_open=True)
        refresh_every = check_integer("refresh_every", refresh_every, 1, "updates")
        if preconditioner is not None:
            if not isinstance(kernel, PAVG):
                raise TypeError(
                    "preconditioner is the matrix of a PAVG kernel, but the kernel is a {}".format(
                        type(kernel).__name__
                    )
                )
            if preconditioner != CHAINS and not callable(preconditioner):
                raise TypeError(
                    "preconditioner must be a function of no arguments returning the "
                    "current [R, R] matrix, or {!r} to fit it to the chains, got {!r}".format(
                        CHAINS, preconditioner
                    )
                )
        elif refresh_every != 1:
            raise ValueError("refresh_every is the period of preconditioner: give both")
        if preconditioner_window is not None and preconditioner != CHAINS:
            raise ValueError(
                "preconditioner_window is the window of preconditioner={!r}: give both".format(
                    CHAINS
                )
            )
        if preconditioner_window is None:
            preconditioner_window = 10
        preconditioner_window = check_integer("preconditioner_window", preconditioner_window, 1)
        self.model = model
        self.kernel = kernel
        self.num_chains = int(num_chains)
        self.mcmc_steps = int(mcmc_steps)
        self.penalty = dict(penalty or {})
        self.penalty_kind = penalty_kind
        self.group_dims = group_dims
        self.buffer_size = buffer_size
        self.reinit_prob = float(reinit_prob)
        self.init = init
        self.ema = ema
        self.warmup_iterations = warmup_iterations
        self.energy_reg = energy_reg
        self.preconditioner = preconditioner
        self.refresh_every = refresh_every
        self.preconditioner_window = preconditioner_window
        self.energy = ModelDensity(
            model, model_args, model_kwargs, max_plate_nesting=max_plate_nesting
        )
        self._counted = TemperedDensity(self.energy)
        self.param_names = self._find_params(model, model_args, model_kwargs or {})
        unknown = sorted(set(self.penalty) - set(self.param_names))
        if unknown:
            raise ValueError(
                "penalty names parameter(s) {} that the model does not use; its "
                "parameters are {}".format(unknown, self.param_names)
            )
        uniform = FactorisedBase.uniform(self.energy.layout)
        if isinstance(init, FactorisedBase) and not torch.equal(
            init.sizes.cpu(), uniform.sizes.cpu()
        ):
            raise ValueError(
                "init is a FactorisedBase over coordinates of {} values, but the model's "
                "take {}".format(init.sizes.tolist(), uniform.sizes.tolist())
            )
        #: the distribution of initial and reset chain states (``None`` for
        #: ``init="data"``, and for ``"data_mean"`` until it is fitted)
        self.init_distribution: Optional[FactorisedBase] = (
            init if isinstance(init, FactorisedBase) else uniform if init == "uniform" else None
        )
        store = pyro.get_param_store()
        self._params = [store.get_param(n).unconstrained() for n in self.param_names]
        self.optimizer = optimizer(self._params, lr=lr)
        self._scheduler = None
        if warmup_iterations:
            self._scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer,
                functools.partial(warmup_factor, warmup_iterations=warmup_iterations),
            )
        # the moving averages of the (unconstrained) parameters, when ``ema`` is given
        self._averages: Optional[List[torch.Tensor]] = None
        self._reset_averages()
        #: parameter updates taken so far
        self.iteration = 0
        #: the ``[R, R]`` preconditioner of the chains' PAVG transitions, from the last
        #: :meth:`refresh_preconditioner` (``None`` without ``preconditioner``: the
        #: kernel's own)
        self.preconditioner_matrix: Optional[torch.Tensor] = None
        #: for ``preconditioner="chains"``: the fit in force (``None`` before the first)
        self.preconditioner_fit: Optional[PreconditionerFit] = None
        # for ``preconditioner="chains"``: the chain records of the last updates
        self._records: collections.deque = collections.deque(maxlen=preconditioner_window)
        if preconditioner == CHAINS:
            size = CandidateGrid(self.energy.layout, kernel.window).relaxed_dim
            own = kernel.preconditioner
            self.preconditioner_matrix = torch.zeros(size, size) if own is None else own
        elif preconditioner is not None:
            self.refresh_preconditioner()
        #: the persistent chain states (or the replay buffer) of this rank, long
        #: ``[C or B, D]`` (``C / world_size`` or ``B / world_size`` rows after
        #: :meth:`distribute`)
        self.chains: Optional[torch.Tensor] = None
        #: ranks sharing the work (1 until :meth:`distribute`) and this one's rank
        self.world_size = 1
        self.rank = 0
        self._group = None
        self._source = 0  # global rank of the group's rank 0

    @staticmethod
    def _find_params(model, args, kwargs) -> List[str]:
        with poutine.block():
            trace = poutine.trace(model, param_only=True).get_trace(*args, **kwargs)
        names = [name for name, site in trace.nodes.items() if site["type"] == "param"]
        if not names:
            raise ValueError(
                "the model has no pyro.param or pyro.module parameters for PCD to learn"
            )
        return names

    @property
    def evaluations(self) -> int:
        """States at which the chains' kernel evaluated the model so far (on this
        rank)."""
        return self._counted.evaluations

    # ------------------------------------------------------------------ EMA
    def _reset_averages(self) -> None:
        """Start the moving averages at the current parameters (:math:`\bar\theta_0 =
        \theta_0`)."""
        if self.ema is not None:
            self._averages = [param.detach().clone() for param in self._params]

    @contextlib.contextmanager
    def use_ema(self) -> Iterator[None]:
        """Context manager: within it the parameter store (and any ``pyro.module``
        network) holds the moving averages of the parameters (:func:`.ema_update`), e.g.
        to evaluate the model by AIS as Grathwohl et al. 2021 [Grathwohl2021]_ do; the
        trained values are put back on exit. The averages are taken over the
        unconstrained values, so a constrained parameter reads as the constraint's
        transform of the averaged unconstrained value. Take no PCD step inside.

        :raises RuntimeError: without ``PCD(ema=...)``.
        """
        if self._averages is None:
            raise RuntimeError("no moving average of the parameters: build PCD(ema=decay)")
        with torch.no_grad():
            trained = [param.detach().clone() for param in self._params]
            for param, average in zip(self._params, self._averages):
                param.copy_(average)
        try:
            yield
        finally:
            with torch.no_grad():
                for param, value in zip(self._params, trained):
                    param.copy_(value)

    def ema_params(self) -> Dict[str, torch.Tensor]:
        """``{name: value}``: the moving averages of the parameters, as
        ``pyro.param(name)`` reads them inside :meth:`use_ema`.

        :raises RuntimeError: without ``PCD(ema=...)``.
        """
        with self.use_ema():
            return {name: pyro.param(name).detach().clone() for name in self.param_names}

    # ------------------------------------------------------------------ PAVG
    def refresh_preconditioner(self) -> torch.Tensor:
        """Set :attr:`preconditioner_matrix`, the preconditioner of the chains' PAVG
        transitions, to the matrix that ``PCD(preconditioner=...)`` returns at the
        current parameters, after checking it, or, for ``preconditioner="chains"``, to
        the fit to the chain records of the last ``preconditioner_window`` updates (the
        matrix in force stays when they hold fewer than two moves). :meth:`step` calls it
        every ``refresh_every`` updates; call it yourself after changing the parameters,
        e.g. to sample the learned model with ``PAVG(model,
        preconditioner=pcd.refresh_preconditioner())``.

        :returns: the ``[R, R]`` matrix.
        :raises RuntimeError: without ``PCD(preconditioner=...)``.
        :raises ValueError: for a matrix of the wrong shape, or not symmetric.
        """
        if self.preconditioner is None:
            raise RuntimeError("no preconditioner to refresh: build PCD(preconditioner=...)")
        if self.preconditioner == CHAINS:
            return self._fit_to_chains()
        with torch.no_grad():
            matrix = torch.as_tensor(self.preconditioner()).detach()
        size = CandidateGrid(self.energy.layout, self.kernel.window).relaxed_dim
        if matrix.shape != (size, size):
            raise ValueError(
                "preconditioner returned a matrix of shape {}, but the model has {} relaxed "
                "values (one per binary or ordinal coordinate, K per categorical "
                "coordinate), so it must be [{}, {}]".format(tuple(matrix.shape), size, size, size)
            )
        if not torch.allclose(matrix, matrix.transpose(0, 1), rtol=1e-5, atol=1e-6):
            raise ValueError("preconditioner returned a matrix that is not symmetric")
        self.preconditioner_matrix = matrix.to(torch.get_default_dtype())
        return self.preconditioner_matrix

    def _fit_to_chains(self) -> torch.Tensor:
        """``preconditioner="chains"``: fit the matrix to the records of the window (of
        every rank after :meth:`distribute`, so that the ranks share it)."""
        if self._records:
            records = list(self._records)
            if self.world_size > 1:
                records = [record for part in self._gather_records(records) for record in part]
            fit = fit_records(records)
            if fit is not None:
                self.preconditioner_fit = fit
                self.preconditioner_matrix = fit.matrix
        return self.preconditioner_matrix

    def _gather_records(self, records: List[ChainRecord]) -> List[List[ChainRecord]]:
        """The chain records of every rank, in rank order."""
        parts = [None] * self.world_size
        dist.all_gather_object(parts, records, group=self._group)
        return parts

    def _run_chains(self, driver: ChainDriver, chains: torch.Tensor) -> torch.Tensor:
        """``mcmc_steps`` transitions of ``driver`` from ``chains``; for
        ``preconditioner="chains"`` the states before and after each are recorded."""
        if self.preconditioner != CHAINS or self.mcmc_steps == 0:
            return run_kernel(driver, chains, self.mcmc_steps)[0]
        record = ChainRecord(CandidateGrid(self.energy.layout, self.kernel.window))
        record.add(driver.init(chains))
        for _ in range(self.mcmc_steps):
            driver.step()
            record.add(driver.state)
        self._records.append(record)
        return driver.state.codes

    def _preconditioned_pavg(self, density) -> Algorithm:
        """The kernel's PAVG on ``density`` with :attr:`preconditioner_matrix`: its
        eigendecomposition goes into the chains' initial state, where PAVG's warmup
        adaptation puts a fitted one."""
        algorithm = self.kernel.build(density)
        matrix = self.preconditioner_matrix

        def init(codes: torch.Tensor) -> NamedTuple:
            eigvals, eigvecs = eigendecomposition(matrix.to(codes.device), codes.shape[0])
            return algorithm.init(codes)._replace(eigvals=eigvals, eigvecs=eigvecs)

        return Algorithm(init, algorithm.step)

    def _check_shards(self, world_size: int) -> None:
        """Raise a :class:`ValueError` unless ``num_chains`` (and ``buffer_size``) split
        into ``world_size`` equal shares."""
        for name, total in (("num_chains", self.num_chains), ("buffer_size", self.buffer_size)):
            if total is not None and total % world_size:
                raise ValueError(
                    "{} ({}) must be divisible by the number of workers ({}): each "
                    "holds an equal share".format(name, total, world_size)
                )

    def distribute(self, process_group: Optional[dist.ProcessGroup] = None) -> PCD:
        """Data-parallel PCD over the ranks of a :mod:`torch.distributed` process group:
        from now on this rank holds ``num_chains / world_size`` chains (and
        ``buffer_size / world_size`` buffer states), :meth:`fit` draws ``batch_size /
        world_size`` data points per update, and :meth:`step` averages the parameter
        gradients (and the loss) over the ranks before the optimiser step, so that the
        update is that of one process on the union of the ranks' batches and chains.
        The parameters are first broadcast from the group's rank 0 (and the moving
        averages of ``ema`` restart from them).

        Every rank of the group must call it (it is a collective), before the first
        :meth:`step`, with torch's generator seeded differently on every rank (else
        the ranks' chains would be copies): :func:`.fit_data_parallel` does all this.

        :param torch.distributed.ProcessGroup process_group: the group (default: the
            default group of :func:`torch.distributed.init_process_group`).
        :returns: ``self``.
        :raises RuntimeError: when torch.distributed is not initialised, after the first
            step, or when two ranks share torch's seed.
        :raises ValueError: unless the chains split into equal shares.
        """
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "PCD.distribute needs an initialised torch.distributed process group "
                "(torch.distributed.init_process_group), or use fit_data_parallel"
            )
        if self.chains is not None:
            raise RuntimeError("call PCD.distribute before the first step")
        world_size = dist.get_world_size(process_group)
        self._check_shards(world_size)
        seeds = [None] * world_size
        dist.all_gather_object(seeds, torch.initial_seed(), group=process_group)
        if len(set(seeds)) < world_size:
            raise RuntimeError(
                "ranks share torch's seed ({}), so their chains would be copies: seed "
                "every rank differently, e.g. torch.manual_seed(block_seeds(seed, "
                "world_size)[rank]) with pyro_gwg.cluster.block_seeds".format(seeds)
            )
        self.world_size = world_size
        self.rank = dist.get_rank(process_group)
        self._group = process_group
        self._source = 0 if process_group is None else dist.get_global_rank(process_group, 0)
        with torch.no_grad():
            for param in self._params:
                dist.broadcast(param, src=self._source, group=process_group)
        self._reset_averages()
        return self

    def parameters_synchronised(self) -> bool:
        """Whether every rank holds the group's rank-0 parameters bit for bit (a
        collective after :meth:`distribute`; always true in one process).

        :rtype: bool
        """
        if self.world_size == 1:
            return True
        flat = torch.cat([param.detach().reshape(-1) for param in self._params])
        reference = flat.clone()
        dist.broadcast(reference, src=self._source, group=self._group)
        same = torch.tensor([float(torch.equal(flat, reference))])
        dist.all_reduce(same, op=dist.ReduceOp.MIN, group=self._group)
        return bool(same)

    def _average_gradients(self, scalars: torch.Tensor) -> torch.Tensor:
        """Average the parameters' gradients and the 1-d ``scalars`` (the loss and its
        terms) over the ranks, in one all-reduce; returns the averaged scalars."""
        grads = []
        for param in self._params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            grads.append(param.grad)
        flat = torch.cat([g.reshape(-1) for g in grads] + [scalars.detach()])
        dist.all_reduce(flat, group=self._group)
        flat /= self.world_size
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
        return flat[offset:]

    def _codes(self, data: Union[Dict[str, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Flat codes of data given in any form :meth:`step` accepts."""
        if isinstance(data, torch.Tensor) and data.dim() == 2 and not data.is_floating_point():
            return data
        return self.data_codes(data)

    def data_codes(self, data: Union[Dict[str, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Flat codes ``[N, D]`` of data given as ``{site: [N, ...]}`` (or, for a model
        with one latent site, as that site's ``[N, ...]`` values)."""
        if isinstance(data, torch.Tensor):
            if len(self.energy.sites) != 1:
                raise ValueError(
                    "the model has latent sites {}: give data as a dict {{site: values}}".format(
                        [s.name for s in self.energy.sites]
                    )
                )
            data = {self.energy.sites[0].name: data}
        if not isinstance(data, dict):
            raise TypeError("data must be a dict {site: [N, ...] values} or a tensor")
        return self.energy.codes_from_values(data)

    def _penalty(self) -> torch.Tensor:
        total = torch.zeros(())
        for name, strength in self.penalty.items():
            value = pyro.param(name)
            if self.penalty_kind == "l1":
                total = total + strength * l1_penalty(value)
            else:
                total = total + strength * group_l1_penalty(value, self.group_dims)
        return total

    def fit_init_distribution(
        self, data: Union[Dict[str, torch.Tensor], torch.Tensor]
    ) -> FactorisedBase:
        """For ``init="data_mean"``: fit the initial distribution of the chains to the
        marginals of ``data``
        (:meth:`FactorisedBase.fit <pyro_gwg.contrib.estimators.ais.FactorisedBase.fit>`,
        add-one smoothing) and use it from now on. :meth:`fit` calls it on all its data
        before the first update; otherwise the first :meth:`step` calls it on its batch
        (after :meth:`distribute`, on the union of the ranks' first batches).

        :param data: ``{site: [N, ...]}``, a tensor for one-site models, or codes
            ``[N, D]`` from :meth:`data_codes`.
        :rtype: FactorisedBase
        :raises RuntimeError: for another ``init``.
        """
        if self.init != "data_mean":
            raise RuntimeError(
                "the initial distribution is fitted to data for init='data_mean' only, "
                "not init={!r}".format(self.init)
            )
        self.init_distribution = FactorisedBase.fit(self.energy.layout, self._codes(data))
        return self.init_distribution

    def _gather(self, codes: torch.Tensor) -> torch.Tensor:
        """The rows of ``codes`` of every rank, in rank order (``codes`` itself in one
        process)."""
        if self.world_size == 1:
            return codes
        parts = [None] * self.world_size
        dist.all_gather_object(parts, codes.cpu(), group=self._group)
        return torch.cat(parts).to(codes.device)

    def _initial_states(self, num: int, data_codes: torch.Tensor) -> torch.Tensor:
        if self.init == "data":
            return data_codes[torch.randint(0, data_codes.shape[0], (num,))].clone()
        return self.init_distribution.sample(num).to(data_codes.device)

    def _draw_chains(self, data_codes: torch.Tensor):
        num_chains = self.num_chains // self.world_size
        buffer_size = None if self.buffer_size is None else self.buffer_size // self.world_size
        if self.chains is None:
            self.chains = self._initial_states(buffer_size or num_chains, data_codes)
        if buffer_size is None:
            index = torch.arange(num_chains)
        else:
            index = torch.randperm(buffer_size)[:num_chains]
        codes = self.chains[index]
        if self.reinit_prob > 0:
            reset = torch.rand(codes.shape[0]) < self.reinit_prob
            if bool(reset.any()):
                codes[reset] = self._initial_states(int(reset.sum()), data_codes)
        return index, codes

    def step(self, batch: Union[Dict[str, torch.Tensor], torch.Tensor]) -> Dict[str, float]:
        """One PCD update from a data batch (this rank's share of it after
        :meth:`distribute`).

        :param batch: data points, ``{site: [B, ...]}`` (or a tensor, see
            :meth:`data_codes`), or flat codes ``[B, D]`` from :meth:`data_codes`.
        :returns: ``{"loss": surrogate + penalty + energy_reg, "penalty": penalty,
            "energy_reg": energy_reg, "lr": learning rate of this update}`` (averaged
            over the ranks after :meth:`distribute`).
        """
        codes = self._codes(batch)
        if self.init == "data_mean" and self.init_distribution is None:
            self.fit_init_distribution(self._gather(codes))
        if self.preconditioner is not None and self.iteration % self.refresh_every == 0:
            if self.iteration > 0 or self.preconditioner != CHAINS:
                self.refresh_preconditioner()
        index, chains = self._draw_chains(codes)
        if self.preconditioner_matrix is None:
            driver = bind_kernel(self.kernel, self._counted)
        else:  # PCD's matrix as an argument of the transitions, not set on the kernel
            driver = ChainDriver(self._preconditioned_pavg, self._counted)
        with torch.no_grad():
            chains = self._run_chains(driver, chains)
        self.chains[index] = chains
        data_log_joint = self.energy.log_joint(codes, differentiable=True)
        chain_log_joint = self.energy.log_joint(chains, differentiable=True)
        penalty = self._penalty()
        energy_reg = self.energy_reg * energy_regulariser(data_log_joint, chain_log_joint)
        loss = pcd_objective(data_log_joint, chain_log_joint) + penalty + energy_reg
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.zero_grad()
        loss.backward()
        scalars = torch.stack([loss, penalty.to(loss.dtype), energy_reg.to(loss.dtype)])
        if self.world_size > 1:
            scalars = self._average_gradients(scalars)
        self.optimizer.step()
        if self._scheduler is not None:
            self._scheduler.step()
        if self._averages is not None:
            self._averages = [
                ema_update(average, param.detach(), self.ema)
                for average, param in zip(self._averages, self._params)
            ]
        self.iteration += 1
        loss, penalty, energy_reg = scalars.detach().tolist()
        return {"loss": loss, "penalty": penalty, "energy_reg": energy_reg, "lr": lr}

    def fit(
        self,
        data: Union[Dict[str, torch.Tensor], torch.Tensor],
        num_iterations: int,
        batch_size: int = 256,
        callback: Optional[Callable[[int, PCD], None]] = None,
    ) -> List[Dict[str, float]]:
        """Run :meth:`step` on ``num_iterations`` random batches of ``data``.

        :param data: ``{site: [N, ...]}`` (or a tensor for one-site models).
        :param int num_iterations: parameter updates.
        :param int batch_size: data points per update (drawn with replacement); after
            :meth:`distribute` the total over the ranks, each drawing an equal share
            from the whole of ``data`` with its own generator.
        :param callable callback: ``callback(iteration, pcd)`` after every update.
        :returns: the per-step dicts of :meth:`step`.

        With ``init="data_mean"`` the initial distribution is first fitted to all of
        ``data`` (:meth:`fit_init_distribution`), unless it already was.
        """
        if batch_size % self.world_size:
            raise ValueError(
                "batch_size ({}) must be divisible by the number of workers ({}): each "
                "draws an equal share".format(batch_size, self.world_size)
            )
        codes = self.data_codes(data)
        if self.init == "data_mean" and self.init_distribution is None:
            self.fit_init_distribution(codes)
        history = []
        for t in range(num_iterations):
            batch = codes[torch.randint(0, codes.shape[0], (batch_size // self.world_size,))]
            history.append(self.step(batch))
            if callback is not None:
                callback(t, self)
        return history

r"""Persistent contrastive divergence (PCD) for discrete energy-based Pyro models.

A model :math:`p_\theta(x) = e^{f_\theta(x)} / Z_\theta` whose parameters are
``pyro.param`` (or ``pyro.module``) values and whose latent discrete sites are the data
has the log-likelihood gradient (Grathwohl et al. 2021 [Grathwohl2021]_, Eq. 12)

.. math:: \nabla_\theta \log p_\theta(x) = \nabla_\theta f_\theta(x)
          - \mathbb E_{p_\theta(x')}\big[\nabla_\theta f_\theta(x')\big].

PCD (Tieleman 2008 [Tieleman2008]_) estimates the expectation with persistent Markov chains that
take a few steps of any pyro-gwg kernel per parameter update, so
:class:`PCD` minimises the surrogate (:func:`pcd_objective`)

.. math:: \mathcal L(\theta) = \frac1C \sum_c f_\theta(x'_c) - \frac1B \sum_b f_\theta(x_b)
          + \lambda\, \Omega(\theta),

whose gradient is the negative of Eq. 12 averaged over the batch plus the penalty:
:math:`\Omega` is the L1 norm (Grathwohl et al. 2021 [Grathwohl2021]_, Appendix F.2) or the
group L1 norm
:math:`\sum_{ij} \lVert J_{ij} \rVert` of Eq. 34 (Appendix H) of chosen parameters.
The chains are the persistent state itself, or ``num_chains`` draws from a larger
replay buffer (Du & Mordatch 2019 [DuMordatch2019]_), optionally reset to noise with some
probability.

:func:`learnable_ising`, :func:`learnable_potts` and :func:`learnable_ebm` are the
models of the learning experiments of Grathwohl et al. 2021 [Grathwohl2021]_ with
``pyro.param`` parameters.

Data-parallel PCD (:meth:`PCD.distribute`, :func:`fit_data_parallel`) shards the
chains and each data batch over the ranks of a :mod:`torch.distributed` process group
and averages the parameter gradients across them (see ``docs/data_parallel_pcd.rst``).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, TypeVar, Union

import pyro
import pyro.poutine as poutine
import torch
import torch.distributed as dist
import torch.multiprocessing

from pyro_gwg._validation import check_integer
from pyro_gwg.cluster import block_seeds
from pyro_gwg.contrib.estimators.ais import FactorisedBase
from pyro_gwg.contrib.estimators.driver import (
    EstimatorEnergy,
    bind_kernel,
    check_kernel,
    run_kernel,
)
from pyro_gwg.energy import DiscreteEnergy
from pyro_gwg.kernels.base import DiscreteKernel
from pyro_gwg.models.ebm import binary_ebm
from pyro_gwg.models.ising import ising
from pyro_gwg.models.potts import potts

__all__ = [
    "PCD",
    "DataParallelFit",
    "coupling_rmse",
    "fit_data_parallel",
    "group_l1_penalty",
    "l1_penalty",
    "learnable_ebm",
    "learnable_ising",
    "learnable_potts",
    "pcd_objective",
    "run_data_parallel",
    "symmetric_couplings",
    "symmetric_potts_couplings",
]

T = TypeVar("T")

PENALTIES = ("l1", "group_l1")
INITS = ("uniform", "data")


# ---------------------------------------------------------------------- pure functions
def pcd_objective(data_log_joint: torch.Tensor, chain_log_joint: torch.Tensor) -> torch.Tensor:
    r"""The PCD surrogate :math:`\overline{f_\theta(x')} - \overline{f_\theta(x)}`: its
    gradient is minus the log-likelihood gradient of Eq. 12 (Grathwohl et al. 2021
    [Grathwohl2021]_), with the
    chains' states :math:`x'` standing in for draws from the model.

    :param torch.Tensor data_log_joint: ``[B]`` :math:`f_\theta` at the data batch.
    :param torch.Tensor chain_log_joint: ``[C]`` :math:`f_\theta` at the chains' states.
    :rtype: torch.Tensor
    """
    return chain_log_joint.mean() - data_log_joint.mean()


def l1_penalty(value: torch.Tensor) -> torch.Tensor:
    r""":math:`\lVert \theta \rVert_1 = \sum |\theta|` (Grathwohl et al. 2021 [Grathwohl2021]_,
    Appendix F.2).

    :param torch.Tensor value: any parameter.
    :rtype: torch.Tensor
    """
    return value.abs().sum()


def group_l1_penalty(value: torch.Tensor, group_dims: int = 2) -> torch.Tensor:
    r"""Group L1 norm :math:`\sum_{g} \lVert \theta_g \rVert_2` over the blocks formed by
    the last ``group_dims`` dimensions; for Potts couplings ``[D, D, K, K]`` and
    ``group_dims=2`` this is :math:`\sum_{ij} \lVert J_{ij} \rVert` (Grathwohl et al. 2021
    [Grathwohl2021]_, Eq. 34).

    :param torch.Tensor value: the parameter.
    :param int group_dims: trailing dimensions of one group.
    :rtype: torch.Tensor
    """
    if int(group_dims) != group_dims or not 1 <= group_dims <= value.dim():
        raise ValueError(
            "group_dims must be an integer in 1 .. {} for a parameter of shape {}, got {}".format(
                value.dim(), tuple(value.shape), group_dims
            )
        )
    dims = tuple(range(value.dim() - group_dims, value.dim()))
    return torch.linalg.vector_norm(value, dim=dims).sum()


def coupling_rmse(learned: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    r"""Root-mean-squared error :math:`\sqrt{\mathrm{mean}((\hat J - J)^2)}` over all
    entries (Grathwohl et al. 2021 [Grathwohl2021]_, Section 6 and Fig. 6).

    :param torch.Tensor learned: :math:`\hat J`.
    :param torch.Tensor true: :math:`J`, same shape.
    :rtype: torch.Tensor
    """
    if learned.shape != true.shape:
        raise ValueError(
            "shapes differ: learned {} vs true {}".format(tuple(learned.shape), tuple(true.shape))
        )
    return (learned.detach() - true).pow(2).mean().sqrt()


def symmetric_couplings(raw: torch.Tensor) -> torch.Tensor:
    r"""Symmetric coupling matrix with zero diagonal, :math:`(A + A^\top) / 2` off the
    diagonal, from an unconstrained ``[D, D]`` parameter.

    :rtype: torch.Tensor
    """
    off_diagonal = 1 - torch.eye(raw.shape[-1], dtype=raw.dtype, device=raw.device)
    return 0.5 * (raw + raw.transpose(-1, -2)) * off_diagonal


def symmetric_potts_couplings(raw: torch.Tensor) -> torch.Tensor:
    r"""Potts couplings with :math:`J_{ji} = J_{ij}^\top` and zero diagonal blocks, from an
    unconstrained ``[D, D, K, K]`` parameter.

    :rtype: torch.Tensor
    """
    size = raw.shape[0]
    off_diagonal = (1 - torch.eye(size, dtype=raw.dtype, device=raw.device))[:, :, None, None]
    return 0.5 * (raw + raw.permute(1, 0, 3, 2)) * off_diagonal


# ---------------------------------------------------------------------- learnable models
def learnable_ising(num_spins: int) -> torch.Tensor:
    r"""The Ising model :func:`~pyro_gwg.models.ising` with learnable couplings and field:
    ``pyro.param("couplings")`` (``[D, D]``, symmetrised by :func:`symmetric_couplings`)
    and ``pyro.param("bias")`` (``[D]``), both initialised at zero; site ``"x"``.

    :param int num_spins: ``D``.
    :returns: the spins as {0, 1} floats, shape ``[D]``.
    """
    raw = pyro.param("couplings", lambda: torch.zeros(num_spins, num_spins))
    bias = pyro.param("bias", lambda: torch.zeros(num_spins))
    return ising(symmetric_couplings(raw), bias)


def learnable_potts(num_sites: int, num_states: int) -> torch.Tensor:
    r"""The dense Potts model :func:`~pyro_gwg.models.potts` with learnable
    ``pyro.param("couplings")`` (``[D, D, K, K]``, see :func:`symmetric_potts_couplings`)
    and ``pyro.param("bias")`` (``[D, K]``), initialised at zero; site ``"z"``.

    :param int num_sites: ``D``.
    :param int num_states: ``K``.
    :returns: one-hot spins ``[D, K]``.
    """
    shape = (num_sites, num_sites, num_states, num_states)
    raw = pyro.param("couplings", lambda: torch.zeros(shape))
    bias = pyro.param("bias", lambda: torch.zeros(num_sites, num_states))
    return potts(symmetric_potts_couplings(raw), bias)


def learnable_ebm(
    net: torch.nn.Module, shape: Union[int, Sequence[int]], name: str = "energy_net"
) -> torch.Tensor:
    r"""The binary EBM :func:`~pyro_gwg.models.binary_ebm` with the network's weights
    registered as Pyro parameters (``pyro.module(name, net)``); site ``"x"``.

    :param torch.nn.Module net: the negative energy :math:`f_\theta`.
    :param shape: shape of one data point.
    :param str name: the module's name in the parameter store.
    :returns: the state as {0, 1} floats.
    """
    pyro.module(name, net)
    return binary_ebm(net, shape)


# ---------------------------------------------------------------------- PCD
class PCD:
    r"""Persistent contrastive divergence for the ``pyro.param`` parameters of a
    discrete energy-based Pyro model, with any pyro-gwg kernel on batched persistent
    chains.

    Each :meth:`step` (i) takes ``num_chains`` chain states (the persistent chains, or
    a draw from the replay buffer, each reset to noise with probability
    ``reinit_prob``), (ii) runs ``mcmc_steps`` kernel transitions on them under the
    current parameters, and (iii) takes one optimiser step on
    :func:`pcd_objective` plus the penalty. The parameter store is shared with Pyro:
    clear it (``pyro.clear_param_store()``) before learning a new model.

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
    :param float lr: learning rate.
    :param optimizer: a :class:`torch.optim.Optimizer` class (default Adam, as in
        the paper).
    :param dict penalty: ``{param name: strength}`` of the penalty :math:`\lambda`.
    :param str penalty_kind: ``"l1"`` or ``"group_l1"`` (Eq. 34).
    :param int group_dims: trailing dimensions of one group for ``"group_l1"``.
    :param int buffer_size: replay buffer size (``None``: plain persistent chains).
    :param float reinit_prob: probability that a drawn chain restarts from noise.
    :param str init: initial chain states, ``"uniform"`` (noise) or ``"data"``
        (random data points of the first batch).
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param int max_plate_nesting: bound on nested plates; guessed when ``None``.

    Example::

        >>> import pyro, torch
        >>> from pyro_gwg import GWG
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
        init: str = "uniform",
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
        if init not in INITS:
            raise ValueError("init must be one of {}, got {!r}".format(INITS, init))
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
        self.energy = DiscreteEnergy(
            model, model_args, model_kwargs, max_plate_nesting=max_plate_nesting
        )
        self._counted = EstimatorEnergy(self.energy)
        self.param_names = self._find_params(model, model_args, model_kwargs or {})
        unknown = sorted(set(self.penalty) - set(self.param_names))
        if unknown:
            raise ValueError(
                "penalty names parameter(s) {} that the model does not use; its "
                "parameters are {}".format(unknown, self.param_names)
            )
        store = pyro.get_param_store()
        self._params = [store.get_param(n).unconstrained() for n in self.param_names]
        self.optimizer = optimizer(self._params, lr=lr)
        self._noise = FactorisedBase.uniform(self.energy.layout)
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
        The parameters are first broadcast from the group's rank 0.

        Every rank of the group must call it (it is a collective), before the first
        :meth:`step`, with torch's generator seeded differently on every rank (else
        the ranks' chains would be copies): :func:`fit_data_parallel` does all this.

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

    def _average_gradients(self, loss: torch.Tensor) -> torch.Tensor:
        """Average the parameters' gradients and ``loss`` over the ranks, in one
        all-reduce; returns the averaged loss."""
        grads = []
        for param in self._params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            grads.append(param.grad)
        flat = torch.cat([g.reshape(-1) for g in grads] + [loss.detach().reshape(1)])
        dist.all_reduce(flat, group=self._group)
        flat /= self.world_size
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
        return flat[-1]

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

    def _initial_states(self, num: int, data_codes: torch.Tensor) -> torch.Tensor:
        if self.init == "data":
            return data_codes[torch.randint(0, data_codes.shape[0], (num,))].clone()
        return self._noise.sample(num).to(data_codes.device)

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
        :returns: ``{"loss": surrogate + penalty, "penalty": penalty}`` (the loss
            averaged over the ranks after :meth:`distribute`).
        """
        if isinstance(batch, torch.Tensor) and batch.dim() == 2 and not batch.is_floating_point():
            codes = batch
        else:
            codes = self.data_codes(batch)
        index, chains = self._draw_chains(codes)
        driver = bind_kernel(self.kernel, self._counted)
        with torch.no_grad():
            chains, _ = run_kernel(driver, chains, self.mcmc_steps)
        self.chains[index] = chains
        penalty = self._penalty()
        loss = (
            pcd_objective(
                self.energy.log_joint(codes, differentiable=True),
                self.energy.log_joint(chains, differentiable=True),
            )
            + penalty
        )
        self.optimizer.zero_grad()
        loss.backward()
        if self.world_size > 1:
            loss = self._average_gradients(loss)
        self.optimizer.step()
        return {"loss": float(loss.detach()), "penalty": float(penalty.detach())}

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
        """
        if batch_size % self.world_size:
            raise ValueError(
                "batch_size ({}) must be divisible by the number of workers ({}): each "
                "draws an equal share".format(batch_size, self.world_size)
            )
        codes = self.data_codes(data)
        history = []
        for t in range(num_iterations):
            batch = codes[torch.randint(0, codes.shape[0], (batch_size // self.world_size,))]
            history.append(self.step(batch))
            if callback is not None:
                callback(t, self)
        return history


# ---------------------------------------------------------------------- data-parallel launcher
class DataParallelFit(NamedTuple):
    """What :func:`fit_data_parallel` returns."""

    #: ``{name: value}``: the learned (constrained) parameters, as ``pyro.param(name)``
    params: Dict[str, torch.Tensor]
    #: the per-update dicts of :meth:`PCD.step` (losses averaged over the workers)
    history: List[Dict[str, float]]


def _check_picklable(name: str, value) -> None:
    try:
        pickle.dumps(value)
    except Exception as error:
        raise TypeError(
            "{} must be picklable to reach the worker processes (a module-level function, "
            "or functools.partial of one; not a lambda or a local function): {}".format(name, error)
        ) from None


def _worker_main(rank: int, world_size: int, folder: str, seed: int, fn: Callable, args: tuple):
    """One spawned worker: seed, join the gloo group, run ``fn(*args)``; rank 0 saves
    the result."""
    torch.manual_seed(block_seeds(seed, world_size)[rank])
    dist.init_process_group(
        "gloo",
        init_method="file://" + os.path.join(folder, "rendezvous"),
        rank=rank,
        world_size=world_size,
    )
    try:
        result = fn(*args)
        if rank == 0:
            torch.save(result, os.path.join(folder, "result.pt"))
    finally:
        dist.destroy_process_group()


def run_data_parallel(
    fn: Callable[..., T], args: tuple = (), *, num_workers: int, seed: int = 0
) -> T:
    """``fn(*args)`` in ``num_workers`` spawned processes on this machine, joined in one
    gloo process group (the default group of each), and rank 0's return value.

    Worker ``rank`` seeds torch's generator with
    ``pyro_gwg.cluster.block_seeds(seed, num_workers)[rank]``, so that the ranks draw
    different numbers, rank 0 draws the same whatever ``num_workers``, and a run is
    repeatable for a seed. The workers are fresh interpreters (``spawn``) with this
    process's environment and ``sys.path``, and each has its own, empty, Pyro parameter
    store. The group's rendezvous is a file in a temporary folder (no port to
    choose). An exception in a worker stops the others and is raised here with the
    worker's traceback (:class:`torch.multiprocessing.ProcessRaisedException`).

    :param callable fn: a picklable function (defined at module level) run on every rank;
        rank 0's return value must be picklable.
    :param tuple args: its arguments (pickled to each worker).
    :param int num_workers: processes (ranks).
    :param int seed: the base seed.
    :returns: rank 0's ``fn(*args)``.
    """
    num_workers = check_integer("num_workers", num_workers, 1, "worker processes")
    seed = check_integer("seed", seed, 0)
    _check_picklable("fn", fn)
    with tempfile.TemporaryDirectory(prefix="pyro_gwg_data_parallel_") as folder:
        torch.multiprocessing.start_processes(
            _worker_main,
            args=(num_workers, folder, seed, fn, args),
            nprocs=num_workers,
            join=True,
            start_method="spawn",
        )
        return torch.load(os.path.join(folder, "result.pt"), weights_only=False)


def _fit_worker(make_pcd: Callable[[], PCD], data, num_iterations: int, batch_size: int):
    pcd = make_pcd().distribute()
    history = pcd.fit(data, num_iterations, batch_size)
    if not pcd.parameters_synchronised():
        raise RuntimeError("the workers' parameters diverged (a rank changed them on its own)")
    params = {name: pyro.param(name).detach().clone() for name in pcd.param_names}
    return DataParallelFit(params, history)


def fit_data_parallel(
    make_pcd: Callable[[], PCD],
    data: Union[Dict[str, torch.Tensor], torch.Tensor],
    *,
    num_workers: int = 2,
    num_iterations: int,
    batch_size: int = 256,
    seed: int = 0,
) -> DataParallelFit:
    """Data-parallel :meth:`PCD.fit` in ``num_workers`` processes on this machine
    (:func:`run_data_parallel`, gloo on CPU): every worker builds its PCD with
    ``make_pcd()``, calls :meth:`PCD.distribute` and fits, holding ``num_chains /
    num_workers`` chains and drawing ``batch_size / num_workers`` data points per update.

    ``make_pcd`` is called in each worker, not here, because the ``pyro.param``
    parameters that PCD learns live in the parameter store of the process that runs
    the model: each worker needs its own PCD on its own store (whose values are then
    broadcast from rank 0). It is called once here too, in a scope of its own of the
    parameter store (this process's store is left as it was), to check the arguments
    before any process starts.

    :param callable make_pcd: builds the :class:`PCD` (with ``num_chains`` the total over
        the workers); picklable: a module-level function or a :func:`functools.partial`
        of one.
    :param data: ``{site: [N, ...]}`` (or a tensor for one-site models), sent to every
        worker.
    :param int num_workers: worker processes.
    :param int num_iterations: parameter updates.
    :param int batch_size: data points per update over all workers; divisible by
        ``num_workers``.
    :param int seed: the base seed of the workers' generators (see
        :func:`run_data_parallel`).
    :returns: rank 0's learned parameters and the history; load them into this
        process's store with ``pyro.get_param_store()[name] = value``.
    :rtype: DataParallelFit
    """
    num_workers = check_integer("num_workers", num_workers, 1, "worker processes")
    num_iterations = check_integer("num_iterations", num_iterations, 1, "parameter updates")
    batch_size = check_integer("batch_size", batch_size, 1, "data points per update")
    if batch_size % num_workers:
        raise ValueError(
            "batch_size ({}) must be divisible by num_workers ({}): each worker draws "
            "batch_size / num_workers data points per update".format(batch_size, num_workers)
        )
    _check_picklable("make_pcd", make_pcd)
    with pyro.get_param_store().scope():
        pcd = make_pcd()
        if not isinstance(pcd, PCD):
            raise TypeError("make_pcd must return a PCD, got {}".format(type(pcd).__name__))
        pcd._check_shards(num_workers)
        pcd.data_codes(data)
    return run_data_parallel(
        _fit_worker,
        (make_pcd, data, num_iterations, batch_size),
        num_workers=num_workers,
        seed=seed,
    )

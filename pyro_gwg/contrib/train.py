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
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Union

import pyro
import pyro.poutine as poutine
import torch

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
    "coupling_rmse",
    "group_l1_penalty",
    "l1_penalty",
    "learnable_ebm",
    "learnable_ising",
    "learnable_potts",
    "pcd_objective",
    "symmetric_couplings",
    "symmetric_potts_couplings",
]

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
        self.optimizer = optimizer(
            [store.get_param(n).unconstrained() for n in self.param_names], lr=lr
        )
        self._noise = FactorisedBase.uniform(self.energy.layout)
        #: the persistent chain states (or the replay buffer), long ``[C or B, D]``
        self.chains: Optional[torch.Tensor] = None

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
        """States at which the chains' kernel evaluated the model so far."""
        return self._counted.evaluations

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
        if self.chains is None:
            self.chains = self._initial_states(self.buffer_size or self.num_chains, data_codes)
        if self.buffer_size is None:
            index = torch.arange(self.num_chains)
        else:
            index = torch.randperm(self.buffer_size)[: self.num_chains]
        codes = self.chains[index]
        if self.reinit_prob > 0:
            reset = torch.rand(codes.shape[0]) < self.reinit_prob
            if bool(reset.any()):
                codes[reset] = self._initial_states(int(reset.sum()), data_codes)
        return index, codes

    def step(self, batch: Union[Dict[str, torch.Tensor], torch.Tensor]) -> Dict[str, float]:
        """One PCD update from a data batch.

        :param batch: data points, ``{site: [B, ...]}`` (or a tensor, see
            :meth:`data_codes`), or flat codes ``[B, D]`` from :meth:`data_codes`.
        :returns: ``{"loss": surrogate + penalty, "penalty": penalty}``.
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
        :param int batch_size: data points per update (drawn with replacement).
        :param callable callback: ``callback(iteration, pcd)`` after every update.
        :returns: the per-step dicts of :meth:`step`.
        """
        codes = self.data_codes(data)
        history = []
        for t in range(num_iterations):
            batch = codes[torch.randint(0, codes.shape[0], (batch_size,))]
            history.append(self.step(batch))
            if callback is not None:
                callback(t, self)
        return history

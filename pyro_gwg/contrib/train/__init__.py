r"""Persistent contrastive divergence (PCD) for discrete energy-based Pyro models.

A model :math:`p_\theta(x) = e^{f_\theta(x)} / Z_\theta` whose parameters are
``pyro.param`` (or ``pyro.module``) values and whose latent discrete sites are the data
has the log-likelihood gradient (Grathwohl et al. 2021 [Grathwohl2021]_, Eq. 12)

.. math:: \nabla_\theta \log p_\theta(x) = \nabla_\theta f_\theta(x)
          - \mathbb E_{p_\theta(x')}\big[\nabla_\theta f_\theta(x')\big].

PCD (Tieleman 2008 [Tieleman2008]_) estimates the expectation with persistent Markov chains that
take a few steps of any pyro-gwg kernel per parameter update, so
:class:`.PCD` minimises the surrogate (:func:`.pcd_objective`)

.. math:: \mathcal L(\theta) = \frac1C \sum_c f_\theta(x'_c) - \frac1B \sum_b f_\theta(x_b)
          + \lambda\, \Omega(\theta),

whose gradient is the negative of Eq. 12 averaged over the batch plus the penalty:
:math:`\Omega` is the L1 norm (Grathwohl et al. 2021 [Grathwohl2021]_, Appendix F.2) or the
group L1 norm
:math:`\sum_{ij} \lVert J_{ij} \rVert` of Eq. 34 (Appendix H) of chosen parameters.
The chains are the persistent state itself, or ``num_chains`` draws from a larger
replay buffer (Du & Mordatch 2019 [DuMordatch2019]_), optionally reset to noise with some
probability.

The deep-EBM recipe of Grathwohl et al. 2021 [Grathwohl2021]_ (Appendix I.2) adds to
this, each a small pure function wired in by :class:`.PCD`:

* a linear learning-rate warm-up (:func:`.warmup_factor`, ``warmup_iterations``);
* an exponential moving average of the parameters for evaluation
  (:func:`.ema_update`, ``ema``; :meth:`.PCD.use_ema`);
* chains and buffer (re)initialised from a factorised Bernoulli / categorical
  distribution fitted to the data marginals (``init="data_mean"``,
  :meth:`FactorisedBase.fit <pyro_gwg.contrib.estimators.ais.FactorisedBase.fit>`);
* the energy-magnitude regulariser of Du & Mordatch 2019 [DuMordatch2019]_
  (:func:`.energy_regulariser`, ``energy_reg``).

For the PCD experiment of Rhodes & Gutmann 2022 [Rhodes2022]_ (Section 5.3), a
:class:`~pyro_gwg.PAVG` kernel's preconditioner can follow the parameters being learned
(``PCD(..., preconditioner=callable)``), e.g. the exact one of an Ising or Potts model
(:func:`.ising_preconditioner`, :func:`.potts_preconditioner`).

:func:`.learnable_ising`, :func:`.learnable_potts`, :func:`.learnable_ebm` and
:func:`.learnable_categorical_ebm` are the models of the learning experiments of
Grathwohl et al. 2021 [Grathwohl2021]_ with ``pyro.param`` parameters.

Data-parallel PCD (:meth:`.PCD.distribute`, :func:`.fit_data_parallel`) shards the
chains and each data batch over the ranks of a :mod:`torch.distributed` process group
and averages the parameter gradients across them (see ``docs/data_parallel_pcd.rst``).

One job per module: :mod:`~pyro_gwg.contrib.train.objectives` (the pure functions of
the update), :mod:`~pyro_gwg.contrib.train.models` (the learnable models and their
preconditioners), :mod:`~pyro_gwg.contrib.train.pcd` (the learner),
:mod:`~pyro_gwg.contrib.train.distributed` (the launcher of data-parallel runs) and
:mod:`~pyro_gwg.contrib.train.rbm` (contrastive divergence for the RBMs of
:mod:`pyro_gwg.models.rbm`); their public names are imported here.
"""

from pyro_gwg.contrib.train.distributed import DataParallelFit, fit_data_parallel, run_data_parallel
from pyro_gwg.contrib.train.models import (
    coupling_rmse,
    ising_preconditioner,
    learnable_categorical_ebm,
    learnable_ebm,
    learnable_ising,
    learnable_potts,
    potts_preconditioner,
    symmetric_couplings,
    symmetric_potts_couplings,
)
from pyro_gwg.contrib.train.objectives import (
    ema_update,
    energy_regulariser,
    group_l1_penalty,
    l1_penalty,
    pcd_objective,
    warmup_factor,
)
from pyro_gwg.contrib.train.pcd import PCD
from pyro_gwg.contrib.train.rbm import train_rbm

__all__ = [
    "PCD",
    "DataParallelFit",
    "coupling_rmse",
    "ema_update",
    "energy_regulariser",
    "fit_data_parallel",
    "group_l1_penalty",
    "ising_preconditioner",
    "l1_penalty",
    "learnable_categorical_ebm",
    "learnable_ebm",
    "learnable_ising",
    "learnable_potts",
    "pcd_objective",
    "potts_preconditioner",
    "run_data_parallel",
    "symmetric_couplings",
    "symmetric_potts_couplings",
    "train_rbm",
    "warmup_factor",
]

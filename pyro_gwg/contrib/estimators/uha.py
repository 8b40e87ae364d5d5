r"""Uncorrected Hamiltonian annealing (UHA) and Hamiltonian AIS for continuous targets.

Geffner & Domke (2021) [Geffner2021]_, *MCMC Variational Inference via Uncorrected Hamiltonian
Annealing* (Geffner & Domke 2021 [Geffner2021]_). The target is an unnormalised density
:math:`\bar p(z)` on
:math:`\mathbb{R}^d` with :math:`Z = \int \bar p`: the posterior of a Pyro model with
continuous latent sites in unconstrained coordinates, or a plain log density (see
:class:`~pyro_gwg.contrib.continuous.ContinuousTarget`).

**Augmented distributions.** Start from a mean-field Gaussian :math:`q(z)` and a momentum
:math:`\rho \sim S = \mathcal{N}(0, M)` with diagonal mass :math:`M`, and bridge to the
target with the densities :math:`\bar\pi_m(z) = q(z)^{1-\beta_m} \bar p(z)^{\beta_m}`,
:math:`0 < \beta_1 < \dots < \beta_K < 1`. Transition :math:`m` (Alg. 3 of the paper,
under-damped Langevin dynamics) is

1. partial momentum refresh :math:`\rho'_m = \eta \rho_m + \sqrt{1 - \eta^2}\, \xi`,
   :math:`\xi \sim \mathcal{N}(0, M)` (damping :math:`\eta`; it leaves :math:`S`
   invariant);
2. one leapfrog step of step size :math:`\epsilon` for the Hamiltonian
   :math:`-\log \bar\pi_m(z) + \tfrac12 \rho^\top M^{-1} \rho` from
   :math:`(z_m, \rho'_m)` to :math:`(z_{m+1}, \rho_{m+1})`.

**UHA** drops the accept-reject step of Hamiltonian AIS. Its importance weight on the
augmented space (the paper's Thm. 2 and the corollary Eq. 10, Alg. 5) is

.. math:: \log w = \log \bar p(z_{K+1}) - \log q(z_1)
          + \sum_{m=1}^{K} \big[\log S(\rho_{m+1}) - \log S(\rho'_m)\big],

so :math:`\mathbb{E}[w] = Z` and :math:`\mathbb{E}[\log w] \le \log Z` for every value of
the parameters. Every random quantity is a differentiable function of standard normal
noise, so the bound is tuned by gradient ascent on :math:`q`'s mean and scales, the step
size, the damping, the schedule :math:`\beta` and the mass (:meth:`UHA.fit`).

**Hamiltonian AIS** (the paper's baseline, Alg. 6) makes the same moves with a
Metropolis-Hastings test on :math:`\bar\pi_m(z)\, S(\rho)` after the leapfrog step (on
rejection the state stays and the momentum is negated); its weight is the AIS weight
(Eq. 8)

.. math:: \log w = \log \bar p(z_{K+1}) - \log q(z_1)
          + \sum_{m=1}^{K} \big[\log \bar\pi_m(z_m) - \log \bar\pi_m(z_{m+1})\big].

Each bridge costs one evaluation of :math:`\bar p` and its gradient (plus one at the start);
the gradients of :math:`\log q` are analytic.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch

from pyro_gwg.contrib.continuous import ContinuousTarget, as_target
from pyro_gwg.contrib.estimators.weights import (
    effective_sample_size,
    log_mean_exp,
    log_mean_exp_se,
    residual_resample,
)

__all__ = [
    "AnnealingParameters",
    "AnnealingResult",
    "UHA",
    "anneal",
    "beta_schedule",
    "geometric_bridge",
    "hamiltonian_ais",
    "hmc_log_accept_ratio",
    "ais_log_weight_increment",
    "leapfrog",
    "mean_field_grad",
    "mean_field_log_prob",
    "momentum_log_prob",
    "refresh_momentum",
    "uha_log_weight_increment",
]

_LOG_2PI = math.log(2 * math.pi)


# --------------------------------------------------------------------------- math
def beta_schedule(logits: torch.Tensor) -> torch.Tensor:
    r"""Increasing inverse temperatures :math:`0 < \beta_1 < \dots < \beta_K < 1` from
    ``K + 1`` unconstrained logits: :math:`\beta_m = \sum_{j \le m} \mathrm{softmax}(a)_j`.
    Zero logits give the linear schedule :math:`\beta_m = m / (K + 1)`.

    :param torch.Tensor logits: shape ``[K + 1]``.
    :returns: shape ``[K]``.
    """
    return torch.cumsum(torch.softmax(logits, dim=-1), dim=-1)[:-1]


def geometric_bridge(beta, q_term: torch.Tensor, p_term: torch.Tensor) -> torch.Tensor:
    r"""The bridge :math:`\log \bar\pi_\beta = (1 - \beta) \log q + \beta \log \bar p`, or
    its gradient when given the two gradients (it is linear in both).

    :param beta: inverse temperature (float or scalar tensor).
    :param torch.Tensor q_term: :math:`\log q` (or :math:`\nabla \log q`).
    :param torch.Tensor p_term: :math:`\log \bar p` (or :math:`\nabla \log \bar p`).
    """
    return (1 - beta) * q_term + beta * p_term


def mean_field_log_prob(z: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """:math:`\\log q(z)` of the mean-field Gaussian :math:`\\mathcal{N}(loc, diag(scale^2))`,
    summed over the last dimension."""
    return -0.5 * (((z - loc) / scale) ** 2 + _LOG_2PI).sum(-1) - scale.log().sum(-1)


def mean_field_grad(z: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """:math:`\\nabla_z \\log q(z) = -(z - loc) / scale^2` of the mean-field Gaussian."""
    return -(z - loc) / scale**2


def momentum_log_prob(rho: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
    r""":math:`\log S(\rho)` for :math:`S = \mathcal{N}(0, \mathrm{diag}(mass))`, summed
    over the last dimension.

    :param torch.Tensor rho: momenta, shape ``[..., d]``.
    :param torch.Tensor mass: diagonal of the mass matrix, shape ``[d]``.
    """
    return -0.5 * (rho**2 / mass + torch.log(mass) + _LOG_2PI).sum(-1)


def refresh_momentum(
    rho: torch.Tensor, noise: torch.Tensor, damping, mass: torch.Tensor
) -> torch.Tensor:
    r"""Partial momentum refresh :math:`\rho' = \eta\rho + \sqrt{1-\eta^2}\, M^{1/2}\xi`
    (step 1 of the paper's Alg. 3); it leaves :math:`S = \mathcal{N}(0, M)` invariant.

    :param torch.Tensor rho: momenta, ``[..., d]``.
    :param torch.Tensor noise: standard normal :math:`\xi`, same shape.
    :param damping: :math:`\eta \in [0, 1)`; 0 is a full refresh.
    :param torch.Tensor mass: diagonal mass, ``[d]``.
    """
    return damping * rho + (1 - damping**2) ** 0.5 * torch.sqrt(mass) * noise


def leapfrog(
    z: torch.Tensor,
    rho: torch.Tensor,
    grad: torch.Tensor,
    step_size,
    mass: torch.Tensor,
    grad_fn: Callable[[torch.Tensor], Tuple[torch.Tensor, object]],
) -> Tuple[torch.Tensor, torch.Tensor, object]:
    r"""One leapfrog step for :math:`H(z, \rho) = -\log\pi(z) + \tfrac12\rho^\top M^{-1}\rho`
    (step 2 of the paper's Alg. 3, without the momentum reversal that step 3 undoes).

    .. math:: \rho_{1/2} = \rho + \tfrac{\epsilon}{2}\nabla\log\pi(z), \quad
              z' = z + \epsilon M^{-1}\rho_{1/2}, \quad
              \rho' = \rho_{1/2} + \tfrac{\epsilon}{2}\nabla\log\pi(z').

    :param torch.Tensor z: positions, ``[..., d]``.
    :param torch.Tensor rho: momenta, ``[..., d]``.
    :param torch.Tensor grad: :math:`\nabla\log\pi(z)`.
    :param step_size: :math:`\epsilon`.
    :param torch.Tensor mass: diagonal mass, ``[d]``.
    :param callable grad_fn: ``z' -> (grad log pi(z'), aux)``; ``aux`` is passed through
        (e.g. the target's value and gradient at :math:`z'`, reused by the next bridge).
    :returns: ``(z', rho', aux)``.
    """
    rho_half = rho + 0.5 * step_size * grad
    z_new = z + step_size * rho_half / mass
    grad_new, aux = grad_fn(z_new)
    return z_new, rho_half + 0.5 * step_size * grad_new, aux


def uha_log_weight_increment(
    rho_new: torch.Tensor, rho_refreshed: torch.Tensor, mass: torch.Tensor
) -> torch.Tensor:
    r"""UHA's per-bridge term :math:`\log S(\rho_{m+1}) - \log S(\rho'_m)` (paper's Eq. 10):
    the ratio of the uncorrected backward and forward transitions (Thm. 2).

    :param torch.Tensor rho_new: momentum after the leapfrog step, :math:`\rho_{m+1}`.
    :param torch.Tensor rho_refreshed: momentum before it, :math:`\rho'_m`.
    :param torch.Tensor mass: diagonal mass.
    """
    return momentum_log_prob(rho_new, mass) - momentum_log_prob(rho_refreshed, mass)


def ais_log_weight_increment(log_pi_old: torch.Tensor, log_pi_new: torch.Tensor) -> torch.Tensor:
    r"""AIS's per-bridge term :math:`\log\bar\pi_m(z_m) - \log\bar\pi_m(z_{m+1})` (paper's
    Eq. 8), both under the bridge density that transition :math:`m` leaves invariant."""
    return log_pi_old - log_pi_new


def hmc_log_accept_ratio(
    log_pi_new: torch.Tensor,
    rho_new: torch.Tensor,
    log_pi_old: torch.Tensor,
    rho_old: torch.Tensor,
    mass: torch.Tensor,
) -> torch.Tensor:
    r"""Metropolis-Hastings log ratio :math:`\log \frac{\bar\pi(z')S(\rho')}{\bar\pi(z)S(\rho)}`
    of a leapfrog proposal (symmetric once followed by a momentum reversal)."""
    return (log_pi_new + momentum_log_prob(rho_new, mass)) - (
        log_pi_old + momentum_log_prob(rho_old, mass)
    )


# ------------------------------------------------------------------ the annealing run
class AnnealingParameters(NamedTuple):
    """Everything one annealing run needs (constrained values).

    :ivar torch.Tensor loc: mean of :math:`q`, ``[d]``.
    :ivar torch.Tensor scale: standard deviations of :math:`q`, ``[d]``.
    :ivar torch.Tensor step_size: leapfrog step size :math:`\\epsilon` (scalar).
    :ivar torch.Tensor damping: momentum damping :math:`\\eta` (scalar).
    :ivar torch.Tensor mass: diagonal momentum mass, ``[d]``.
    :ivar torch.Tensor betas: the schedule :math:`\\beta_1 < \\dots < \\beta_K`, ``[K]``.
    """

    loc: torch.Tensor
    scale: torch.Tensor
    step_size: torch.Tensor
    damping: torch.Tensor
    mass: torch.Tensor
    betas: torch.Tensor


class AnnealingResult(NamedTuple):
    """Output of one run of UHA or Hamiltonian AIS over ``N`` particles.

    :ivar torch.Tensor log_weights: :math:`\\log w` per particle, ``[N]``.
    :ivar torch.Tensor samples: final states :math:`z_{K+1}` (unconstrained), ``[N, d]``:
        approximate posterior draws (resample with the weights for importance-corrected
        ones).
    :ivar acceptance_rate: mean acceptance probability of the Metropolis tests (Hamiltonian
        AIS; ``None`` for UHA).
    :ivar ContinuousTarget target: the target, for :meth:`constrained`.
    """

    log_weights: torch.Tensor
    samples: torch.Tensor
    acceptance_rate: Optional[float]
    target: ContinuousTarget

    @property
    def elbo(self) -> torch.Tensor:
        """The lower bound estimate :math:`\\frac1N\\sum_n \\log w_n` (differentiable for
        UHA)."""
        return self.log_weights.mean()

    @property
    def elbo_stderr(self) -> float:
        """Monte Carlo standard error of :attr:`elbo`."""
        n = self.log_weights.numel()
        return float(self.log_weights.detach().std() / math.sqrt(n)) if n > 1 else math.nan

    @property
    def log_evidence(self) -> torch.Tensor:
        """:math:`\\log \\frac1N \\sum_n w_n`: the log of an unbiased estimate of
        :math:`Z` (a tighter stochastic lower bound on :math:`\\log Z` than :attr:`elbo`)."""
        return log_mean_exp(self.log_weights)

    @property
    def log_evidence_stderr(self) -> float:
        """Delta-method standard error of :attr:`log_evidence`."""
        return float(log_mean_exp_se(self.log_weights.detach()))

    @property
    def ess(self) -> float:
        """Effective sample size of the normalised importance weights."""
        return float(effective_sample_size(self.log_weights.detach()))

    def constrained(self) -> Dict[str, torch.Tensor]:
        """The final states as model site values in constrained space, ``[N, ...]``."""
        return self.target.constrain(self.samples.detach())

    def resample(self, num_samples: int) -> torch.Tensor:
        """Importance-resampled final states (residual resampling on the weights),
        ``[num_samples, d]``: draws that also correct for the bias of the annealing."""
        index = residual_resample(self.log_weights.detach(), num_samples)
        return self.samples.detach()[index]


def anneal(
    target: ContinuousTarget,
    params: AnnealingParameters,
    num_particles: int,
    *,
    corrected: bool = False,
    create_graph: bool = False,
) -> AnnealingResult:
    """Run UHA (``corrected=False``, paper's Alg. 5) or Hamiltonian AIS
    (``corrected=True``, Alg. 6) on ``num_particles`` particles in parallel.

    :param ContinuousTarget target: the unnormalised target :math:`\\bar p`.
    :param AnnealingParameters params: initial distribution, dynamics and schedule.
    :param int num_particles: number of independent runs.
    :param bool corrected: add the Metropolis-Hastings test (Hamiltonian AIS).
    :param bool create_graph: keep the graph through every step, so that the bound
        can be differentiated with respect to ``params`` (UHA only).
    """
    if corrected and create_graph:
        raise ValueError("Hamiltonian AIS is not differentiable (accept-reject steps).")
    loc, scale, step_size, damping, mass, betas = params
    shape = (num_particles, target.dim)
    z = loc + scale * torch.randn(shape)
    log_w = -mean_field_log_prob(z, loc, scale)
    rho = torch.sqrt(mass) * torch.randn(shape)
    log_p, grad_p = target.value_and_grad(z, create_graph)
    accept_prob = []
    for beta in betas:
        rho_ref = refresh_momentum(rho, torch.randn(shape), damping, mass)

        def grad_fn(x, beta=beta):
            value, grad = target.value_and_grad(x, create_graph)
            return geometric_bridge(beta, mean_field_grad(x, loc, scale), grad), (value, grad)

        grad_pi = geometric_bridge(beta, mean_field_grad(z, loc, scale), grad_p)
        z_new, rho_new, (log_p_new, grad_p_new) = leapfrog(
            z, rho_ref, grad_pi, step_size, mass, grad_fn
        )
        if not corrected:
            log_w = log_w + uha_log_weight_increment(rho_new, rho_ref, mass)
            z, rho, log_p, grad_p = z_new, rho_new, log_p_new, grad_p_new
            continue
        log_pi_old = geometric_bridge(beta, mean_field_log_prob(z, loc, scale), log_p)
        log_pi_new = geometric_bridge(beta, mean_field_log_prob(z_new, loc, scale), log_p_new)
        log_ratio = hmc_log_accept_ratio(log_pi_new, rho_new, log_pi_old, rho_ref, mass)
        log_ratio = torch.nan_to_num(log_ratio, nan=-math.inf)
        accept_prob.append(log_ratio.clamp(max=0).exp().mean())
        accept = torch.rand(num_particles).log() < log_ratio
        z = torch.where(accept[:, None], z_new, z)
        rho = torch.where(accept[:, None], rho_new, -rho_ref)
        log_p = torch.where(accept, log_p_new, log_p)
        grad_p = torch.where(accept[:, None], grad_p_new, grad_p)
        log_w = log_w + ais_log_weight_increment(
            log_pi_old, torch.where(accept, log_pi_new, log_pi_old)
        )
    acceptance = float(torch.stack(accept_prob).mean()) if accept_prob else None
    return AnnealingResult(log_w + log_p, z, acceptance if corrected else None, target)


def hamiltonian_ais(
    target,
    model_args: tuple = (),
    model_kwargs: Optional[dict] = None,
    *,
    num_bridges: int,
    num_particles: int,
    loc: torch.Tensor,
    scale: torch.Tensor,
    step_size: float,
    damping: float,
    mass: Optional[torch.Tensor] = None,
    betas: Optional[torch.Tensor] = None,
    dim: Optional[int] = None,
) -> AnnealingResult:
    """Hamiltonian AIS: the paper's baseline (Alg. 6), not differentiable.

    :param target: a :class:`~pyro_gwg.contrib.continuous.ContinuousTarget`, a Pyro model with
        continuous latent sites, or a batched log density (with ``dim``).
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param int num_bridges: number of bridging densities (= transitions) :math:`K`.
    :param int num_particles: number of independent runs.
    :param torch.Tensor loc: mean of the initial Gaussian :math:`q`.
    :param torch.Tensor scale: its standard deviations.
    :param float step_size: leapfrog step size :math:`\\epsilon`.
    :param float damping: momentum damping :math:`\\eta`.
    :param torch.Tensor mass: diagonal momentum mass (default :math:`1/scale^2`).
    :param torch.Tensor betas: schedule, shape ``[num_bridges]`` (default linear,
        :math:`\\beta_m = m/(K+1)`).
    :param int dim: dimension of a plain log density.
    """
    target = as_target(target, model_args, model_kwargs, dim)
    scale = torch.as_tensor(scale, dtype=torch.get_default_dtype()).expand(target.dim)
    loc = torch.as_tensor(loc, dtype=torch.get_default_dtype()).expand(target.dim)
    if betas is None:
        betas = beta_schedule(torch.zeros(num_bridges + 1))
    if len(betas) != num_bridges:
        raise ValueError("betas has {} entries for {} bridges".format(len(betas), num_bridges))
    params = AnnealingParameters(
        loc,
        scale,
        torch.as_tensor(float(step_size)),
        torch.as_tensor(float(damping)),
        scale**-2 if mass is None else torch.as_tensor(mass).expand(target.dim),
        betas,
    )
    with torch.no_grad():
        return anneal(target, params, num_particles, corrected=True)


# ---------------------------------------------------------------------- the module
class UHA(torch.nn.Module):
    """Uncorrected Hamiltonian annealing: a differentiable lower bound on :math:`\\log Z`
    whose parameters are tuned with ``torch.optim`` (Geffner & Domke 2021, Alg. 5).

    Calling the module runs ``num_particles`` annealing runs and returns an
    :class:`AnnealingResult`: its :attr:`~AnnealingResult.elbo` is the differentiable
    bound, its :attr:`~AnnealingResult.samples` the approximate posterior draws.

    All tuned quantities are unconstrained :class:`torch.nn.Parameter` s:

    * ``loc`` and ``log_scale``: the mean-field Gaussian :math:`q` (the paper tunes it with
      the rest; :meth:`fit` with ``bridges=False`` first fits it by plain VI, the paper's
      initialisation);
    * ``step_logit``: :math:`\\epsilon = \\epsilon_{max}\\,\\mathrm{sigmoid}(\\cdot)`, kept
      below ``max_step_size`` as the paper does for stability;
    * ``damping_logit``: :math:`\\eta = \\mathrm{sigmoid}(\\cdot)`;
    * ``schedule_logits``: :math:`\\beta` by :func:`beta_schedule`;
    * ``log_mass``: the diagonal mass relative to :math:`q`'s scale,
      :math:`M = \\mathrm{diag}(e^{\\ell} / \\sigma_q^2)`; at :math:`\\ell = 0` a leapfrog
      step moves :math:`z` by :math:`\\epsilon\\,\\sigma_q` per unit of momentum noise, so
      the step size is in units of :math:`q`'s scale.

    Freeze any of them with ``requires_grad_(False)``.

    :param model: a Pyro model with continuous latent sites, a batched log density
        ``[..., dim] -> [...]`` (give ``dim``) or a
        :class:`~pyro_gwg.contrib.continuous.ContinuousTarget`.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param int num_bridges: number of bridging densities :math:`K` (one leapfrog step and
        one target gradient each).
    :param int dim: dimension of a plain log density.
    :param torch.Tensor init_loc: initial mean of :math:`q` (default: the model's
        initial point, or zero).
    :param float init_scale: initial standard deviation of :math:`q`.
    :param float step_size: initial :math:`\\epsilon`.
    :param float damping: initial :math:`\\eta`.
    :param float max_step_size: upper bound :math:`\\epsilon_{max}` on the step size.

    Example::

        >>> import torch
        >>> from pyro_gwg.contrib.estimators import UHA
        >>> _ = torch.manual_seed(0)
        >>> uha = UHA(lambda z: -0.5 * (z**2).sum(-1), dim=2, num_bridges=4)
        >>> losses = uha.fit(20, num_particles=8)
        >>> result = uha(num_particles=64)
        >>> bool(result.elbo < torch.log(torch.tensor(2 * torch.pi)) + 0.1)  # log Z = log 2pi
        True
    """

    def __init__(
        self,
        model,
        model_args: tuple = (),
        model_kwargs: Optional[dict] = None,
        *,
        num_bridges: int,
        dim: Optional[int] = None,
        init_loc: Optional[torch.Tensor] = None,
        init_scale: float = 0.1,
        step_size: float = 0.1,
        damping: float = 0.5,
        max_step_size: float = 1.0,
    ):
        super().__init__()
        if num_bridges < 0:
            raise ValueError("num_bridges must be >= 0, got {}".format(num_bridges))
        if not 0 < step_size < max_step_size:
            raise ValueError("step_size must lie in (0, max_step_size = {})".format(max_step_size))
        if not 0 < damping < 1:
            raise ValueError("damping must lie in (0, 1), got {}".format(damping))
        self.target = as_target(model, model_args, model_kwargs, dim)
        d = self.target.dim
        loc = self.target.initial if init_loc is None else init_loc
        loc = torch.as_tensor(loc, dtype=torch.get_default_dtype()).detach()
        self.num_bridges = int(num_bridges)
        self.max_step_size = float(max_step_size)
        self.loc = torch.nn.Parameter(loc.expand(d).clone())
        self.log_scale = torch.nn.Parameter(torch.full((d,), math.log(init_scale)))
        self.step_logit = torch.nn.Parameter(torch.logit(torch.tensor(step_size / max_step_size)))
        self.damping_logit = torch.nn.Parameter(torch.logit(torch.tensor(float(damping))))
        self.schedule_logits = torch.nn.Parameter(torch.zeros(num_bridges + 1))
        self.log_mass = torch.nn.Parameter(torch.zeros(d))

    # constrained views
    @property
    def scale(self) -> torch.Tensor:
        """Standard deviations of :math:`q`."""
        return self.log_scale.exp()

    @property
    def step_size(self) -> torch.Tensor:
        """Leapfrog step size :math:`\\epsilon`."""
        return self.max_step_size * torch.sigmoid(self.step_logit)

    @property
    def damping(self) -> torch.Tensor:
        """Momentum damping :math:`\\eta`."""
        return torch.sigmoid(self.damping_logit)

    @property
    def betas(self) -> torch.Tensor:
        """The schedule :math:`\\beta_1 < \\dots < \\beta_K`."""
        return beta_schedule(self.schedule_logits)

    @property
    def mass(self) -> torch.Tensor:
        """Diagonal momentum mass :math:`e^{\\ell} / \\sigma_q^2`."""
        return self.log_mass.exp() / self.scale**2

    def annealing_parameters(self, bridges: bool = True) -> AnnealingParameters:
        """The current constrained parameters (no bridges: plain VI with :math:`q`)."""
        betas = self.betas if bridges else self.betas[:0]
        return AnnealingParameters(
            self.loc, self.scale, self.step_size, self.damping, self.mass, betas
        )

    def forward(self, num_particles: int = 1, bridges: bool = True) -> AnnealingResult:
        """Run UHA on ``num_particles`` particles, keeping the graph for gradients.

        :param int num_particles: number of independent runs.
        :param bool bridges: ``False`` gives the plain ELBO of :math:`q`.
        """
        create_graph = torch.is_grad_enabled()
        return anneal(
            self.target,
            self.annealing_parameters(bridges),
            num_particles,
            create_graph=create_graph,
        )

    def fit(
        self,
        num_steps: int,
        *,
        num_particles: int = 16,
        lr: float = 0.01,
        bridges: bool = True,
        callback: Optional[Callable[[int, AnnealingResult], None]] = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
    ) -> List[float]:
        """Maximise the bound with Adam on all parameters that require gradients.

        :param int num_steps: optimisation steps.
        :param int num_particles: particles per gradient estimate.
        :param float lr: Adam's learning rate.
        :param bool bridges: ``False`` fits :math:`q` alone by plain VI (the paper's
            initialisation before tuning UHA).
        :param callable callback: called as ``callback(step, result)`` after each step.
        :param torch.optim.Optimizer optimizer: use this optimizer (built on this module's
            parameters) instead of a new Adam; its state carries over between calls, e.g.
            to lower the learning rate in stages.
        :returns: the bound estimate at each step.
        :raises FloatingPointError: when the bound is not finite (the uncorrected dynamics
            diverged; lower ``max_step_size``).
        """
        if optimizer is None:
            params = [p for p in self.parameters() if p.requires_grad]
            optimizer = torch.optim.Adam(params, lr=lr)
        history = []
        for step in range(num_steps):
            optimizer.zero_grad()
            result = self(num_particles, bridges=bridges)
            loss = -result.elbo
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    "UHA bound is {} at step {}: the uncorrected dynamics diverged. Lower "
                    "max_step_size (now {}) or fit q first (bridges=False).".format(
                        float(-loss), step, self.max_step_size
                    )
                )
            loss.backward()
            optimizer.step()
            history.append(float(-loss.detach()))
            if callback is not None:
                callback(step, result)
        return history

    def hamiltonian_ais(
        self, num_particles: int, num_bridges: Optional[int] = None
    ) -> AnnealingResult:
        """Hamiltonian AIS with the current :math:`q`, step size, damping and mass: this
        module's schedule, or the linear schedule when ``num_bridges`` is given.

        :param int num_particles: number of independent runs.
        :param int num_bridges: number of bridges (default: this module's :math:`K`).
        """
        with torch.no_grad():
            p = self.annealing_parameters()
            betas = p.betas if num_bridges is None else None
            return hamiltonian_ais(
                self.target,
                num_bridges=self.num_bridges if num_bridges is None else num_bridges,
                num_particles=num_particles,
                loc=p.loc,
                scale=p.scale,
                step_size=float(p.step_size),
                damping=float(p.damping),
                mass=p.mass,
                betas=betas,
            )

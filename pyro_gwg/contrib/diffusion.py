r"""Reverse Ornstein-Uhlenbeck diffusion with a Monte Carlo score (McDonald & Barron 2022
[McDonald2022]_).

*A score based approach to sampling using Monte Carlo estimation of score and oracle
access to target density.* The target on :math:`\mathbb{R}^d` is written against a
standard normal reference,

.. math:: p_0(\theta) \propto e^{f(\theta) - \frac12 \theta^\top\theta}.

The forward OU process :math:`d\theta_t = -\theta_t\,dt + \sqrt2\,dW_t` (Eq. 3) has
:math:`\theta_t = e^{-t}\theta_0 + \sigma_t Z` with :math:`\sigma_t = \sqrt{1 - e^{-2t}}`
(Eq. 4), and the score of its marginal :math:`p_t` is a ratio of Gaussian expectations
(Eqs. 6-7). With :math:`U_1, \dots, U_K \sim \mathcal{N}(0, I)`,
:math:`x_k = \sigma_t U_k + e^{-t}\theta` and the self-normalised weights
:math:`w_k \propto e^{f(x_k)}` (Eq. 8), two estimators are

.. math:: \hat s_1(\theta, t) = -\theta + \frac{e^{-t}}{\sigma_t}\sum_k w_k U_k
          \quad\text{(Eq. 9)}, \qquad
          \hat s_2(\theta, t) = -\theta + e^{-t}\sum_k w_k \nabla f(x_k)
          \quad\text{(Eq. 10)}.

:math:`\hat s_1` needs no gradients and is used for :math:`t >` ``switch_time``
(0.1, the paper's choice); :math:`\hat s_2` avoids the :math:`1/\sigma_t` blow-up as
:math:`t \to 0`. Sampling starts from :math:`\theta_T \sim \mathcal{N}(0, I)` and takes
Euler steps of the reverse SDE down to :math:`t = 0`:

.. math:: \theta_{t-\delta} = \theta_t + \delta\,(\theta_t + 2\hat s(\theta_t, t))
          + \sqrt{2\delta}\, Z.

**Targets.** Give :math:`f` itself (``f=``, the paper's form), a batched log density
:math:`\log p_0` (``dim=``), or a Pyro model with continuous latent sites (its posterior
in unconstrained coordinates). For the last two the reference is handled explicitly:
:math:`f(\theta) = \log p_0(\mu + s\,\theta) + \tfrac12 \theta^\top\theta` in standardised
coordinates :math:`\theta = (x - \mu)/s`, with ``loc`` :math:`\mu` and ``scale``
:math:`s` (default 0 and 1) chosen so that the posterior is not far out in the tails of
:math:`\mathcal{N}(0, I)`; the returned samples are :math:`x = \mu + s\theta`.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch

from pyro_gwg.contrib.continuous import ContinuousTarget, as_target

__all__ = [
    "DiffusionResult",
    "MCScoreSampler",
    "gradient_weighted_score",
    "importance_weights",
    "monte_carlo_score",
    "ou_coefficients",
    "reverse_ou_step",
    "time_grid",
    "u_weighted_score",
]


# --------------------------------------------------------------------------- math
def ou_coefficients(t: float) -> Tuple[float, float]:
    r"""Mean factor and standard deviation of the OU transition,
    :math:`\theta_t = e^{-t}\theta_0 + \sigma_t Z` (McDonald & Barron 2022 [McDonald2022]_, Eq. 4).

    :param float t: time, :math:`t > 0`.
    :returns: :math:`(e^{-t}, \sigma_t = \sqrt{1 - e^{-2t}})`.
    """
    return math.exp(-t), math.sqrt(-math.expm1(-2 * t))


def importance_weights(log_f: torch.Tensor) -> torch.Tensor:
    r"""Self-normalised weights :math:`w_k = e^{f(x_k)} / \sum_j e^{f(x_j)}` over the last
    dimension (Eq. 8), computed stably from :math:`f(x_k)`.

    :param torch.Tensor log_f: :math:`f` at the draws, ``[..., K]``.
    """
    return torch.softmax(log_f, dim=-1)


def u_weighted_score(
    theta: torch.Tensor, u: torch.Tensor, weights: torch.Tensor, t: float
) -> torch.Tensor:
    r""":math:`\hat s_1(\theta, t) = -\theta + \frac{e^{-t}}{\sigma_t}\sum_k w_k U_k`
    (Eq. 9).

    :param torch.Tensor theta: points, ``[N, d]``.
    :param torch.Tensor u: the standard normal draws, ``[N, K, d]``.
    :param torch.Tensor weights: :func:`importance_weights`, ``[N, K]``.
    :param float t: time.
    """
    decay, sigma = ou_coefficients(t)
    return -theta + decay / sigma * (weights.unsqueeze(-1) * u).sum(-2)


def gradient_weighted_score(
    theta: torch.Tensor, grad_f: torch.Tensor, weights: torch.Tensor, t: float
) -> torch.Tensor:
    r""":math:`\hat s_2(\theta, t) = -\theta + e^{-t}\sum_k w_k \nabla f(x_k)` (Eq. 10).

    :param torch.Tensor theta: points, ``[N, d]``.
    :param torch.Tensor grad_f: :math:`\nabla f(x_k)`, ``[N, K, d]``.
    :param torch.Tensor weights: :func:`importance_weights`, ``[N, K]``.
    :param float t: time.
    """
    decay, _ = ou_coefficients(t)
    return -theta + decay * (weights.unsqueeze(-1) * grad_f).sum(-2)


def reverse_ou_step(
    theta: torch.Tensor, score: torch.Tensor, delta: float, noise: torch.Tensor
) -> torch.Tensor:
    r"""One Euler-Maruyama step of the reverse OU SDE from :math:`t` to :math:`t - \delta`:
    :math:`\theta - \delta(-\theta - 2\hat s) + \sqrt{2\delta}\,Z` (McDonald & Barron 2022
    [McDonald2022]_, Section 2).

    :param torch.Tensor theta: points at time :math:`t`, ``[N, d]``.
    :param torch.Tensor score: score estimate at :math:`(\theta, t)`.
    :param float delta: step size :math:`\delta`.
    :param torch.Tensor noise: standard normal :math:`Z`, like ``theta``.
    """
    return theta + delta * (theta + 2 * score) + math.sqrt(2 * delta) * noise


def time_grid(final_time: float, step_size: float) -> List[Tuple[float, float]]:
    """The times :math:`t` at which the score is estimated and the step taken from each,
    ``[(T, delta), (T - delta, delta), ..., (t_last, t_last)]``; the last step ends exactly
    at 0 (it is shorter when ``T / delta`` is not an integer).

    :param float final_time: :math:`T > 0`.
    :param float step_size: :math:`\\delta > 0`.
    """
    if final_time <= 0 or step_size <= 0:
        raise ValueError("final_time and step_size must be positive")
    num = max(1, math.ceil(final_time / step_size - 1e-9))
    grid = []
    for j in range(num):
        t = final_time - j * step_size
        grid.append((t, min(step_size, t)))
    return grid


def monte_carlo_score(
    f: Callable[[torch.Tensor], torch.Tensor],
    f_and_grad: Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]],
    theta: torch.Tensor,
    t: float,
    num_draws: int,
    switch_time: float = 0.1,
) -> torch.Tensor:
    r"""Monte Carlo estimate of :math:`\nabla\log p_t(\theta)` from ``num_draws`` fresh
    Gaussian draws per point: :math:`\hat s_1` (Eq. 9, values of :math:`f` only) for
    :math:`t >` ``switch_time``, else :math:`\hat s_2` (Eq. 10, with gradients).

    :param callable f: :math:`f` on ``[..., d]``.
    :param callable f_and_grad: :math:`(f, \nabla f)` on ``[..., d]``.
    :param torch.Tensor theta: points, ``[N, d]``.
    :param float t: time, :math:`t > 0`.
    :param int num_draws: :math:`K`.
    :param float switch_time: where the estimator changes.
    """
    decay, sigma = ou_coefficients(t)
    u = torch.randn(theta.shape[0], num_draws, theta.shape[1])
    x = sigma * u + decay * theta.unsqueeze(-2)
    if t > switch_time:
        return u_weighted_score(theta, u, importance_weights(f(x)), t)
    log_f, grad_f = f_and_grad(x)
    return gradient_weighted_score(theta, grad_f, importance_weights(log_f), t)


# ------------------------------------------------------------------------- sampler
class DiffusionResult(NamedTuple):
    """Output of :meth:`MCScoreSampler.sample`.

    :ivar torch.Tensor samples: the draws in the target's coordinates (unconstrained for
        a Pyro model), ``[N, d]``.
    :ivar int num_evaluations: points at which :math:`f` was evaluated (all particles).
    :ivar int num_gradients: points at which :math:`\\nabla f` was evaluated (included in
        ``num_evaluations``).
    :ivar trajectory: ``[steps + 1, N, d]`` states from :math:`T` to 0 in the target's
        coordinates, if requested.
    :ivar ContinuousTarget target: the target, for :meth:`constrained`.
    """

    samples: torch.Tensor
    num_evaluations: int
    num_gradients: int
    trajectory: Optional[torch.Tensor]
    target: ContinuousTarget

    def constrained(self) -> Dict[str, torch.Tensor]:
        """The draws as model site values in constrained space (a plain density:
        ``{"z": samples}``)."""
        return self.target.constrain(self.samples)


class MCScoreSampler:
    """Sampler by the reverse OU diffusion with a Monte Carlo score (McDonald & Barron 2022
    [McDonald2022]_).

    Particles are simulated together, each with its own ``num_draws`` Gaussian draws per
    step; they are processed in chunks of at most ``max_points`` evaluation points.
    One run costs ``num_draws * ceil(final_time / step_size)`` evaluations of :math:`f`
    per particle, with gradients only for :math:`t \\le` ``switch_time``.

    :param target: a Pyro model with continuous latent sites, a batched log density
        :math:`\\log p_0` on ``[..., dim]`` (give ``dim``), or a
        :class:`~pyro_gwg.contrib.continuous.ContinuousTarget`. Leave it out when giving ``f``.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param callable f: the paper's :math:`f`, batched on ``[..., dim]``, for targets
        :math:`e^{f(\\theta) - |\\theta|^2/2}` (give ``dim``).
    :param int dim: dimension of a plain density or of ``f``.
    :param int num_draws: :math:`K`, Gaussian draws per score estimate.
    :param float step_size: Euler step :math:`\\delta`.
    :param float final_time: :math:`T`, where the reverse diffusion starts.
    :param float switch_time: :math:`\\hat s_1` above it, :math:`\\hat s_2` at or below.
    :param torch.Tensor loc: centre :math:`\\mu` of the standardised coordinates (not with
        ``f``).
    :param torch.Tensor scale: scales :math:`s` of the standardised coordinates (not with
        ``f``).
    :param int max_points: bound on particles times draws per evaluation.

    Example (the paper's four-mode target, small settings)::

        >>> import torch
        >>> from pyro_gwg.contrib.diffusion import MCScoreSampler
        >>> from pyro_gwg.contrib.models import four_mode_tanh
        >>> _ = torch.manual_seed(0)
        >>> sampler = MCScoreSampler(f=four_mode_tanh, dim=1, num_draws=200, step_size=0.05)
        >>> result = sampler.sample(100)
        >>> result.samples.shape
        torch.Size([100, 1])
    """

    def __init__(
        self,
        target=None,
        model_args: tuple = (),
        model_kwargs: Optional[dict] = None,
        *,
        f: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        dim: Optional[int] = None,
        num_draws: int = 1000,
        step_size: float = 0.01,
        final_time: float = 2.0,
        switch_time: float = 0.1,
        loc: Optional[torch.Tensor] = None,
        scale: Optional[torch.Tensor] = None,
        max_points: int = 2**20,
    ):
        if (target is None) == (f is None):
            raise ValueError("Give exactly one of target (model or log density) and f.")
        if f is not None:
            if dim is None:
                raise ValueError("f needs dim, the dimension of theta.")
            if loc is not None or scale is not None:
                raise ValueError("loc and scale apply to a target, not to f.")
            self.target = ContinuousTarget.from_log_density(f, dim)
        else:
            self.target = as_target(target, model_args, model_kwargs, dim)
        self._add_reference = f is None
        d = self.target.dim
        dtype = torch.get_default_dtype()
        self.loc = torch.as_tensor(0.0 if loc is None else loc, dtype=dtype).expand(d)
        self.scale = torch.as_tensor(1.0 if scale is None else scale, dtype=dtype).expand(d)
        if not bool((self.scale > 0).all()):
            raise ValueError("scale must be positive")
        if num_draws < 1:
            raise ValueError("num_draws must be >= 1")
        self.num_draws = int(num_draws)
        self.grid = time_grid(final_time, step_size)
        self.switch_time = float(switch_time)
        self.max_points = int(max_points)

    @property
    def dim(self) -> int:
        """Dimension of the target."""
        return self.target.dim

    def f(self, theta: torch.Tensor) -> torch.Tensor:
        """:math:`f` in standardised coordinates, ``[..., d] -> [...]`` (up to a
        constant)."""
        value = self.target(self.loc + self.scale * theta)
        if self._add_reference:
            value = value + 0.5 * (theta**2).sum(-1)
        return value

    def f_and_grad(self, theta: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """:math:`f` and :math:`\\nabla f` in standardised coordinates."""
        value, grad = self.target.value_and_grad(self.loc + self.scale * theta)
        grad = self.scale * grad
        if self._add_reference:
            value = value + 0.5 * (theta**2).sum(-1)
            grad = grad + theta
        return value, grad

    def score(self, theta: torch.Tensor, t: float) -> torch.Tensor:
        """Monte Carlo score :func:`monte_carlo_score` at ``theta`` (standardised, ``[N, d]``),
        in chunks of at most ``max_points`` evaluation points."""
        chunk = max(1, self.max_points // self.num_draws)
        with torch.no_grad():
            return torch.cat(
                [
                    monte_carlo_score(
                        self.f, self.f_and_grad, part, t, self.num_draws, self.switch_time
                    )
                    for part in torch.split(theta, chunk)
                ]
            )

    def sample(self, num_samples: int, *, trajectory: bool = False) -> DiffusionResult:
        """Run the reverse diffusion for ``num_samples`` particles.

        :param int num_samples: number of particles (independent draws).
        :param bool trajectory: also return the states at every time.
        """
        evaluations, gradients = self.target.num_evaluations, self.target.num_gradients
        theta = torch.randn(num_samples, self.dim)
        path = [theta] if trajectory else None
        for t, delta in self.grid:
            score = self.score(theta, t)
            theta = reverse_ou_step(theta, score, delta, torch.randn_like(theta))
            if path is not None:
                path.append(theta)
        samples = self.loc + self.scale * theta
        return DiffusionResult(
            samples,
            self.target.num_evaluations - evaluations,
            self.target.num_gradients - gradients,
            None if path is None else self.loc + self.scale * torch.stack(path),
            self.target,
        )

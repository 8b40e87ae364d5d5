r"""Bayesian variable selection in linear regression (Rhodes & Gutmann 2022 [Rhodes2022]_, Section
5.2 and Appendix G, after the set-up of Titsias & Yau 2017) [TitsiasYau2017]_.

Given a design matrix :math:`X \in \mathbb R^{n \times d}` and responses
:math:`y \in \mathbb R^n`, a binary mask :math:`s \in \{0, 1\}^d` selects covariates:

.. math:: y = X (s \odot w) + \varepsilon, \qquad
          \varepsilon \sim \mathcal N(0, \sigma^2 I_n), \qquad
          w \mid \sigma^2 \sim \mathcal N(0, \sigma^2 \tau^2 I_d), \qquad
          \sigma^2 \sim \mathrm{InvGamma}(a_0, b_0).

The conjugate normal-inverse-gamma prior is integrated out analytically: with
:math:`S = \operatorname{diag}(s)`, :math:`P = S X^T X S + \tau^{-2} I_d`,
:math:`a_n = a_0 + n/2` and
:math:`b_n = b_0 + \tfrac12\big(y^T y - (S X^T y)^T P^{-1} (S X^T y)\big)`,

.. math:: \log p(y \mid s) = -\tfrac n2 \log 2\pi - \tfrac12 \log\lvert \tau^2 P \rvert
          + a_0 \log b_0 - a_n \log b_n + \log\Gamma(a_n) - \log\Gamma(a_0),

the density of a multivariate Student-t, :math:`y \mid s \sim t_{2a_0}\big(0,
\tfrac{b_0}{a_0}(I_n + \tau^2 X S X^T)\big)`. The mask has the sparsity prior
:math:`s_i \sim \mathrm{Bernoulli}(\rho)`.

**Relaxation.** Gradient-based samplers differentiate :math:`\log p(y \mid s)` with
respect to a real-valued mask. Here the mask scales the columns of the design matrix,
:math:`X S`, as in the generative model. The derivative of the likelihood with respect
to a switched-off :math:`s_i` is then zero (``s`` enters through :math:`s_i s_j` and
:math:`s_i X^T y` only), so proposals to switch a covariate on are driven by the prior
and the step size, while proposals to switch one off are informed. The alternative
that puts the mask in the prior variance of the weights (:math:`K = I + \tau^2 X S X^T`
affine in ``s``; the same model for bits) has an informative but far too steep
derivative at :math:`s_i = 0` (about ``n`` times the actual log-likelihood change on
the default data); measured with GWG, NCG, AVG and PAVG it stalled every sampler
(GWG accepted almost nothing, mean marginal error about 0.04 against 0.002 with
:math:`X S` after the same number of steps), so :math:`X S` is used.

As in the paper, ``num_irrelevant`` further bits :math:`t_j \sim
\mathrm{Bernoulli}(0.001)`, independent of everything else, make the sampling problem
harder while the posterior stays exactly computable: :func:`variable_selection_exact`
enumerates the :math:`2^d` masks and multiplies by the known factorised marginals of
the irrelevant bits.

:func:`variable_selection_data` generates a seeded data set with strongly correlated
pairs of covariates, of which one member of some pairs is active; the posterior then
has to decide between the two members of a pair, which gives it several modes.

**Spike-and-slab regression.** :func:`spike_and_slab_regression` is the same collapsed
model for users (latent site ``"gamma"``, no irrelevant bits), also with a fixed noise
scale :math:`\sigma` and the prior :math:`w \sim \mathcal N(0, \tau^2 I_d)` (then
:math:`y \mid s \sim \mathcal N(0, \sigma^2 I_n + \tau^2 X S X^T)`);
:func:`spike_and_slab_coefficients` draws the weights (and :math:`\sigma`) given
posterior draws of the mask. Keeping the weights as latent sites and sampling them with
:class:`~pyro_gwg.MixedGibbs` instead mixes poorly (``docs/getting_started.rst``,
section "Spike-and-slab regression").
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch

__all__ = [
    "SpikeAndSlabCoefficients",
    "VariableSelectionExact",
    "pairwise_tables",
    "selection_log_likelihood",
    "spike_and_slab_coefficients",
    "spike_and_slab_regression",
    "variable_selection",
    "variable_selection_data",
    "variable_selection_exact",
]


def variable_selection_data(
    num_obs: int = 50,
    num_pairs: int = 10,
    active_pairs: int = 4,
    correlation: float = 0.95,
    weight: float = 1.0,
    noise_scale: float = 1.0,
    seed: Optional[int] = 0,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""A seeded regression data set with ``d = 2 * num_pairs`` covariates.

    Covariates come in pairs: both members of pair ``j`` are a shared standard normal
    factor plus independent noise, scaled so that their correlation is
    ``correlation``. The first member of each of the first ``active_pairs`` pairs is
    active with weight ``weight`` (alternating in sign); the responses are
    :math:`y = X w + \varepsilon`, :math:`\varepsilon \sim \mathcal N(0,`
    ``noise_scale`` :math:`^2)`. Columns of ``X`` and ``y`` are centred.

    :param int num_obs: ``n``.
    :param int num_pairs: number of pairs (``d = 2 * num_pairs``).
    :param int active_pairs: pairs with an active member.
    :param float correlation: correlation of the two members of a pair.
    :param float weight: magnitude of the active weights.
    :param float noise_scale: standard deviation of the response noise.
    :param int seed: seed (``None``: the global RNG).
    :returns: ``(X [n, d], y [n], w [d])``, ``w`` the true weights.
    """
    if not 0 <= active_pairs <= num_pairs:
        raise ValueError("need 0 <= active_pairs <= num_pairs")
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    shared = torch.randn(num_obs, num_pairs, 1, generator=generator)
    own = torch.randn(num_obs, num_pairs, 2, generator=generator)
    x = (math.sqrt(correlation) * shared + math.sqrt(1 - correlation) * own).reshape(num_obs, -1)
    w = torch.zeros(2 * num_pairs)
    signs = torch.tensor([(-1.0) ** j for j in range(active_pairs)])
    w[0 : 2 * active_pairs : 2] = weight * signs
    y = x @ w + noise_scale * torch.randn(num_obs, generator=generator)
    return x - x.mean(0), y - y.mean(), w


def _conjugate_solve(
    mask: torch.Tensor, x: torch.Tensor, y: torch.Tensor, prior_scale: float
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""The Cholesky factor :math:`L` of :math:`P = S X^T X S + \tau^{-2} I_d` and
    :math:`L^{-1} S X^T y`, batched over masks (``x`` and ``y`` already in the mask's
    dtype)."""
    dim = x.shape[-1]
    precision = (x.T @ x) * (mask.unsqueeze(-1) * mask.unsqueeze(-2))
    precision = precision + torch.eye(dim, dtype=mask.dtype) / prior_scale**2
    chol = torch.linalg.cholesky(precision)
    solved = torch.linalg.solve_triangular(chol, (mask * (x.T @ y)).unsqueeze(-1), upper=False)
    return chol, solved.squeeze(-1)


def selection_log_likelihood(
    mask: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    prior_scale: float = 1.0,
    a0: float = 1.0,
    b0: float = 1.0,
    noise_scale: Optional[float] = None,
) -> torch.Tensor:
    r"""Log marginal likelihood :math:`\log p(y \mid s)` of the module docstring,
    batched over masks and differentiable in a relaxed mask.

    With ``noise_scale`` :math:`= \sigma` given, the noise scale is fixed instead and
    the weights have the prior :math:`w \sim \mathcal N(0, \tau^2 I_d)`: then
    :math:`y \mid s \sim \mathcal N(0, \sigma^2 I_n + \tau^2 X S X^T)`, computed as
    above with :math:`X / \sigma` and :math:`y / \sigma`:

    .. math:: \log p(y \mid s) = -\tfrac n2 \log 2\pi - n \log\sigma
              - \tfrac12 \log\lvert \tau^2 P \rvert
              - \tfrac1{2\sigma^2} \big(y^T y - \sigma^{-2} (S X^T y)^T P^{-1} S X^T y\big),
              \qquad P = S X^T X S / \sigma^2 + \tau^{-2} I_d.

    :param torch.Tensor mask: ``[..., d]`` mask (binary or relaxed in ``[0, 1]``).
    :param torch.Tensor x: ``[n, d]`` design matrix.
    :param torch.Tensor y: ``[n]`` responses.
    :param float prior_scale: :math:`\tau`.
    :param float a0: inverse-gamma shape :math:`a_0` (unused with ``noise_scale``).
    :param float b0: inverse-gamma scale :math:`b_0` (unused with ``noise_scale``).
    :param float noise_scale: a fixed :math:`\sigma`; ``None`` (default): the
        inverse-gamma prior on :math:`\sigma^2`.
    :returns: ``[...]``.
    """
    num_obs, dim = x.shape
    x, y = x.to(mask.dtype), y.to(mask.dtype)
    if noise_scale is not None:
        x, y = x / noise_scale, y / noise_scale
    chol, solved = _conjugate_solve(mask, x, y, prior_scale)
    log_det = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    log_det = log_det + dim * math.log(prior_scale**2)
    residual = y @ y - solved.pow(2).sum(-1)
    if noise_scale is not None:
        return (
            -0.5 * num_obs * math.log(2 * math.pi)
            - num_obs * math.log(noise_scale)
            - 0.5 * log_det
            - 0.5 * residual
        )
    a_n = a0 + 0.5 * num_obs
    b_n = b0 + 0.5 * residual
    return (
        -0.5 * num_obs * math.log(2 * math.pi)
        - 0.5 * log_det
        + a0 * math.log(b0)
        - a_n * torch.log(b_n)
        + math.lgamma(a_n)
        - math.lgamma(a0)
    )


def _sample_mask(
    name: str, x: torch.Tensor, y: torch.Tensor, inclusion_prob: float, **likelihood
) -> torch.Tensor:
    """Sample the mask site ``name`` and add the collapsed likelihood as a factor."""
    with pyro.plate("covariates", x.shape[-1]):
        mask = pyro.sample(name, dist.Bernoulli(torch.tensor(inclusion_prob)))
    # keep the covariate dimension so that batched chains stay apart
    log_lik = selection_log_likelihood(mask, x, y, **likelihood).unsqueeze(-1)
    pyro.factor("marginal_likelihood", log_lik)
    return mask


def variable_selection(
    x: torch.Tensor,
    y: torch.Tensor,
    num_irrelevant: int = 80,
    inclusion_prob: float = 0.2,
    irrelevant_prob: float = 0.001,
    prior_scale: float = 1.0,
    a0: float = 1.0,
    b0: float = 1.0,
    noise_scale: Optional[float] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    r"""The variable-selection posterior as a Pyro model.

    Latent sites: ``"s"`` (``[d]`` bits, the covariate mask, prior
    Bernoulli(``inclusion_prob``)) and, if ``num_irrelevant > 0``, ``"t"``
    (``[num_irrelevant]`` bits, Bernoulli(``irrelevant_prob``), unrelated to the data).
    The marginal likelihood :func:`selection_log_likelihood` enters as a
    ``pyro.factor``.

    :param torch.Tensor x: ``[n, d]`` design matrix.
    :param torch.Tensor y: ``[n]`` responses.
    :param int num_irrelevant: number of irrelevant bits.
    :param float inclusion_prob: prior inclusion probability :math:`\rho`.
    :param float irrelevant_prob: prior probability of an irrelevant bit.
    :param float prior_scale: :math:`\tau`.
    :param float a0: inverse-gamma shape.
    :param float b0: inverse-gamma scale.
    :param float noise_scale: a fixed noise scale (see :func:`selection_log_likelihood`).
    :returns: ``(s, t)`` (``t`` is ``None`` without irrelevant bits).
    """
    s = _sample_mask(
        "s", x, y, inclusion_prob, prior_scale=prior_scale, a0=a0, b0=b0, noise_scale=noise_scale
    )
    t = None
    if num_irrelevant > 0:
        with pyro.plate("irrelevant", num_irrelevant):
            t = pyro.sample("t", dist.Bernoulli(torch.tensor(irrelevant_prob)))
    return s, t


class VariableSelectionExact(NamedTuple):
    """Exact posterior summaries of :func:`variable_selection`, over all
    ``D = d + num_irrelevant`` bits (``s`` first, then ``t``).

    :ivar torch.Tensor marginals: ``[D]`` :math:`p(s_i = 1 \\mid y)`.
    :ivar torch.Tensor joint: ``[D, D]`` :math:`p(s_i = 1, s_j = 1 \\mid y)` (the
        diagonal holds the marginals).
    :ivar torch.Tensor log_evidence: :math:`\\log p(y)`.
    """

    marginals: torch.Tensor
    joint: torch.Tensor
    log_evidence: torch.Tensor


def variable_selection_exact(
    x: torch.Tensor,
    y: torch.Tensor,
    num_irrelevant: int = 80,
    inclusion_prob: float = 0.2,
    irrelevant_prob: float = 0.001,
    prior_scale: float = 1.0,
    a0: float = 1.0,
    b0: float = 1.0,
    noise_scale: Optional[float] = None,
    chunk_size: int = 65536,
) -> VariableSelectionExact:
    r"""Exact marginals and pairwise inclusion probabilities of
    :func:`variable_selection` (float64): all :math:`2^d` masks of the covariates are
    enumerated; the irrelevant bits are independent of them and of each other, with
    marginal ``irrelevant_prob``.

    Arguments as in :func:`variable_selection`; ``chunk_size`` masks are evaluated at once.

    :rtype: VariableSelectionExact
    """
    dim = x.shape[-1]
    x, y = x.double(), y.double()
    bits = 2 ** torch.arange(dim - 1, -1, -1)
    log_weights, first, second = [], torch.zeros(dim, dtype=torch.float64), None
    log_prior_on = math.log(inclusion_prob)
    log_prior_off = math.log1p(-inclusion_prob)
    for start in range(0, 2**dim, chunk_size):
        index = torch.arange(start, min(start + chunk_size, 2**dim))
        masks = ((index.unsqueeze(-1) // bits) % 2).double()
        count = masks.sum(-1)
        log_w = selection_log_likelihood(masks, x, y, prior_scale, a0, b0, noise_scale)
        log_w = log_w + count * log_prior_on + (dim - count) * log_prior_off
        log_weights.append(log_w)
    log_evidence = torch.logsumexp(torch.cat(log_weights), 0)
    second = torch.zeros(dim, dim, dtype=torch.float64)
    for chunk, log_w in zip(range(0, 2**dim, chunk_size), log_weights):
        index = torch.arange(chunk, chunk + log_w.numel())
        masks = ((index.unsqueeze(-1) // bits) % 2).double()
        probs = (log_w - log_evidence).exp()
        first = first + probs @ masks
        second = second + masks.T @ (probs.unsqueeze(-1) * masks)
    total = dim + num_irrelevant
    marginals = torch.cat([first, torch.full((num_irrelevant,), irrelevant_prob).double()])
    joint = marginals.unsqueeze(-1) * marginals
    joint[:dim, :dim] = second
    joint.diagonal().copy_(marginals)
    return VariableSelectionExact(marginals, joint.reshape(total, total), log_evidence)


def pairwise_tables(marginals: torch.Tensor, joint: torch.Tensor) -> torch.Tensor:
    r"""The ``2 x 2`` tables :math:`p(s_i = k, s_j = l)` of every pair of bits from the
    marginals and the joint inclusion probabilities.

    :param torch.Tensor marginals: ``[D]`` :math:`p(s_i = 1)`.
    :param torch.Tensor joint: ``[D, D]`` :math:`p(s_i = 1, s_j = 1)`.
    :returns: ``[D, D, 2, 2]``, indexed ``[i, j, k, l]``.
    """
    p_i, p_j = marginals.unsqueeze(-1), marginals.unsqueeze(0)
    one_one = joint
    one_zero = p_i - joint
    zero_one = p_j - joint
    zero_zero = 1 - p_i - p_j + joint
    return torch.stack(
        [torch.stack([zero_zero, zero_one], -1), torch.stack([one_zero, one_one], -1)], -2
    )


def spike_and_slab_regression(
    x: torch.Tensor,
    y: torch.Tensor,
    inclusion_prob: float = 0.2,
    prior_scale: float = 1.0,
    noise_scale: Optional[float] = None,
    a0: float = 1.0,
    b0: float = 1.0,
) -> torch.Tensor:
    r"""Spike-and-slab linear regression with the coefficients integrated out: the
    form of the model to sample with a discrete kernel such as :class:`~pyro_gwg.GWG`.

    The natural way to write spike-and-slab regression keeps the coefficients as
    latent sites,

    .. math:: \gamma_j \sim \mathrm{Bernoulli}(\rho), \qquad
              \beta_j \sim \mathcal N(0, \tau^2), \qquad
              y \sim \mathcal N\big(X (\gamma \odot \beta), \sigma^2 I_n\big),

    and mixes poorly under :class:`~pyro_gwg.MixedGibbs`: while :math:`\gamma_j = 0`,
    :math:`\beta_j` wanders over its prior, and :math:`\gamma_j` can switch on only when
    :math:`\beta_j` happens to sit where the data put it, so the indicators of rarely
    included covariates switch rarely and their inclusion probabilities come out far
    off (measured in ``docs/getting_started.rst``, section "Spike-and-slab
    regression"). Here the coefficients are integrated out by Gaussian conjugacy, so
    that the only latent site is the mask:

    .. math:: y \mid \gamma \sim \mathcal N\big(0, \sigma^2 I_n + \tau^2 X \Gamma X^T\big),
              \qquad \Gamma = \operatorname{diag}(\gamma).

    With ``noise_scale=None`` the noise variance is integrated out too, under the
    conjugate prior :math:`\beta \mid \sigma^2 \sim \mathcal N(0, \sigma^2 \tau^2 I_d)`,
    :math:`\sigma^2 \sim \mathrm{InvGamma}(a_0, b_0)` (``prior_scale`` is then relative
    to :math:`\sigma`), and :math:`y \mid \gamma` is a multivariate Student-t (see
    :func:`selection_log_likelihood`, which this model adds as a ``pyro.factor``).

    Latent site: ``"gamma"`` (``[d]`` bits, in a plate ``"covariates"``). Draw the
    coefficients afterwards with :func:`spike_and_slab_coefficients`; the exact
    inclusion probabilities of a small problem are
    ``variable_selection_exact(x, y, num_irrelevant=0, ...).marginals``.

    Example::

        >>> import pyro
        >>> from pyro_gwg import GWG, MCMC
        >>> from pyro_gwg.models import spike_and_slab_coefficients, spike_and_slab_regression
        >>> from pyro_gwg.models import variable_selection_data
        >>> x, y, _ = variable_selection_data(
        ...     num_obs=50, num_pairs=3, active_pairs=2, correlation=0.0, seed=2)
        >>> pyro.set_rng_seed(0)
        >>> kernel = GWG(spike_and_slab_regression, jit_compile=False)
        >>> mcmc = MCMC(kernel, num_samples=200, warmup_steps=50, num_chains=4,
        ...             disable_progbar=True)
        >>> mcmc.run(x, y, noise_scale=1.0)
        >>> gamma = mcmc.get_samples()["gamma"]  # [800, 6]
        >>> beta = spike_and_slab_coefficients(gamma, x, y, noise_scale=1.0).coefficients
        >>> beta.shape
        torch.Size([800, 6])

    :param torch.Tensor x: ``[n, d]`` design matrix.
    :param torch.Tensor y: ``[n]`` responses.
    :param float inclusion_prob: prior inclusion probability :math:`\rho`.
    :param float prior_scale: prior scale :math:`\tau` of the coefficients.
    :param float noise_scale: a fixed noise scale :math:`\sigma`; ``None`` (default):
        :math:`\sigma^2 \sim \mathrm{InvGamma}(a_0, b_0)`, integrated out.
    :param float a0: inverse-gamma shape (unused with ``noise_scale``).
    :param float b0: inverse-gamma scale (unused with ``noise_scale``).
    :returns: the mask :math:`\gamma`, ``[d]``.
    """
    return _sample_mask(
        "gamma",
        x,
        y,
        inclusion_prob,
        prior_scale=prior_scale,
        a0=a0,
        b0=b0,
        noise_scale=noise_scale,
    )


class SpikeAndSlabCoefficients(NamedTuple):
    r"""Posterior draws of :func:`spike_and_slab_coefficients`.

    :ivar torch.Tensor coefficients: ``[..., d]`` :math:`\gamma \odot \beta`, zero at
        the excluded covariates.
    :ivar torch.Tensor noise_scale: ``[...]`` :math:`\sigma` (the fixed value, if one was
        given).
    """

    coefficients: torch.Tensor
    noise_scale: torch.Tensor


def spike_and_slab_coefficients(
    gamma: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    prior_scale: float = 1.0,
    noise_scale: Optional[float] = None,
    a0: float = 1.0,
    b0: float = 1.0,
) -> SpikeAndSlabCoefficients:
    r"""Draw the coefficients of :func:`spike_and_slab_regression` (and the noise scale)
    given posterior draws of the mask, one draw per mask: together with the masks they
    are draws from the joint posterior of the uncollapsed model.

    With :math:`P = \Gamma X^T X \Gamma / \sigma^2 + \tau^{-2} I_d` and a fixed noise
    scale :math:`\sigma`,

    .. math:: \beta \mid \gamma, y \sim \mathcal N\big(P^{-1} \Gamma X^T y / \sigma^2,
              P^{-1}\big);

    with the noise variance integrated out (``noise_scale=None``), :math:`P = \Gamma
    X^T X \Gamma + \tau^{-2} I_d`, :math:`\sigma^2 \mid \gamma, y \sim
    \mathrm{InvGamma}(a_n, b_n)` with :math:`a_n, b_n` of the module docstring, and
    :math:`\beta \mid \sigma^2, \gamma, y \sim \mathcal N(P^{-1} \Gamma X^T y,
    \sigma^2 P^{-1})`. At an excluded covariate this is the prior of :math:`\beta_j`,
    which does not enter the regression; the returned coefficients
    :math:`\gamma \odot \beta` are zero there.

    Draws use Pyro's global random state (``pyro.set_rng_seed``).

    :param torch.Tensor gamma: ``[..., d]`` masks, e.g. ``mcmc.get_samples()["gamma"]``.
    :param torch.Tensor x: ``[n, d]`` design matrix.
    :param torch.Tensor y: ``[n]`` responses.
    :param float prior_scale: :math:`\tau`, as given to the model.
    :param float noise_scale: :math:`\sigma`, as given to the model.
    :param float a0: inverse-gamma shape, as given to the model.
    :param float b0: inverse-gamma scale, as given to the model.
    :rtype: SpikeAndSlabCoefficients
    """
    num_obs = x.shape[0]
    mask, y = gamma.to(x.dtype), y.to(x.dtype)
    if noise_scale is not None:
        x, y = x / noise_scale, y / noise_scale
    chol, solved = _conjugate_solve(mask, x, y, prior_scale)
    if noise_scale is None:
        b_n = b0 + 0.5 * (y @ y - solved.pow(2).sum(-1))
        sigma = dist.InverseGamma(torch.full_like(b_n, a0 + 0.5 * num_obs), b_n).sample().sqrt()
        scale = sigma
    else:
        sigma = torch.full(mask.shape[:-1], float(noise_scale), dtype=x.dtype, device=x.device)
        scale = torch.ones_like(sigma)
    # beta = L^{-T} (L^{-1} S X^T y + scale * eps): mean P^{-1} S X^T y, covariance
    # scale^2 P^{-1}
    noise = scale.unsqueeze(-1) * torch.randn_like(solved)
    beta = torch.linalg.solve_triangular(chol.mT, (solved + noise).unsqueeze(-1), upper=True)
    return SpikeAndSlabCoefficients(mask * beta.squeeze(-1), sigma)

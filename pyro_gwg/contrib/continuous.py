r"""Batched log densities on :math:`\mathbb{R}^d` for the continuous-target tools.

:class:`ContinuousTarget` is what :class:`~pyro_gwg.contrib.estimators.uha.UHA` and
:class:`~pyro_gwg.contrib.diffusion.MCScoreSampler` evaluate: a function from particles
``z`` of shape ``[..., d]`` to unnormalised log densities of shape ``[...]``, with
gradients by autograd and a count of the points evaluated. It is built

* from a Pyro model whose latent sites are all continuous
  (:meth:`ContinuousTarget.from_model`). Pyro's own
  :func:`~pyro.infer.mcmc.util.initialize_model` supplies the transforms to
  unconstrained space, the site shapes and the reference ``potential_fn``; the log density
  of a flat unconstrained vector is the log joint of the conditioned model plus the log
  absolute Jacobian determinant of the map from unconstrained to constrained values, which
  is :math:`-\mathrm{potential\_fn}`. Particles are evaluated together with
  :func:`torch.func.vmap` (Pyro's ``potential_fn`` itself cannot be vmapped: it wraps the
  model in ``poutine.enum``); the vmapped density is checked against ``potential_fn`` when
  the target is built;
* from a plain callable (:meth:`ContinuousTarget.from_log_density`), batched over leading
  dimensions (or vmapped for you with ``batched=False``).
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import pyro
import pyro.poutine as poutine
import torch
from pyro.infer.autoguide.initialization import init_to_median
from pyro.infer.mcmc.util import initialize_model

from pyro_gwg import _trace
from pyro_gwg.sites import UnsupportedModelError

__all__ = ["ContinuousTarget", "as_target", "check_continuous_model"]


def check_continuous_model(model: Callable, model_args: tuple = (), model_kwargs=None) -> None:
    """Raise :class:`~pyro_gwg.sites.UnsupportedModelError` naming the first latent site
    of ``model`` that is discrete, or a subsampling plate.

    :param callable model: a Pyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    """
    trace = _trace.trace_model(model, model_args, model_kwargs)
    _trace.check_full_plates(trace, "the continuous-target tools need the full log density")
    for site in _trace.sample_sites(trace, "latent"):
        name, fn = site["name"], site["fn"]
        if fn.support.is_discrete:
            raise UnsupportedModelError(
                "Latent site '{}' is discrete ({}). UHA and MCScoreSampler work on "
                "continuous latent sites only. Sample a model with discrete sites with "
                "pyro_gwg.MixedGibbs (HMC/NUTS on the continuous sites, a pyro-gwg kernel "
                "on the discrete ones), or sum the site out by hand inside the model "
                "(pyro.factor with a logsumexp over its values).".format(name, type(fn).__name__)
            )


class ContinuousTarget:
    """An unnormalised log density on :math:`\\mathbb{R}^d`, evaluated in batches.

    Call it on ``z`` of shape ``[..., dim]`` to get the log density, shape ``[...]``;
    :meth:`value_and_grad` adds the gradient. Usually built with :meth:`from_model` or
    :meth:`from_log_density` (or :func:`as_target`).

    :param callable log_density: maps ``[B, dim]`` to ``[B]``.
    :param int dim: dimension.
    :param list sites: ``(name, shape)`` of each unconstrained site in the flat vector
        (Pyro models; ``None`` for a plain density).
    :param dict transforms: the unconstrained-to-constrained maps' inverses, per site,
        as returned by :func:`~pyro.infer.mcmc.util.initialize_model`.
    :param torch.Tensor initial: a point of finite density (flat, unconstrained).

    :ivar int num_evaluations: points at which the log density has been evaluated.
    :ivar int num_gradients: points at which its gradient has been evaluated (each also
        counts as an evaluation).
    """

    def __init__(
        self,
        log_density: Callable[[torch.Tensor], torch.Tensor],
        dim: int,
        *,
        sites: Optional[List[Tuple[str, torch.Size]]] = None,
        transforms: Optional[Dict[str, object]] = None,
        initial: Optional[torch.Tensor] = None,
    ):
        self._log_density = log_density
        self.dim = int(dim)
        self.sites = sites
        self.transforms = transforms
        self.initial = torch.zeros(self.dim) if initial is None else initial
        self.num_evaluations = 0
        self.num_gradients = 0

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_model(
        cls,
        model: Callable,
        model_args: tuple = (),
        model_kwargs: Optional[dict] = None,
        *,
        init_strategy: Callable = init_to_median,
        vmap_chunk_size: Optional[int] = None,
    ) -> ContinuousTarget:
        """The posterior of a Pyro model in unconstrained coordinates.

        :param callable model: a Pyro model whose latent sites are all continuous.
        :param tuple model_args: its positional arguments.
        :param dict model_kwargs: its keyword arguments.
        :param callable init_strategy: Pyro initialisation strategy for :attr:`initial`.
        :param int vmap_chunk_size: passed to :func:`torch.func.vmap` to bound memory.
        :raises UnsupportedModelError: for a discrete latent site or a subsampled plate.
        """
        model_kwargs = dict(model_kwargs or {})
        check_continuous_model(model, model_args, model_kwargs)
        with torch.enable_grad():  # Pyro's initialisation takes gradients
            init_params, potential_fn, transforms, _ = initialize_model(
                model, model_args, model_kwargs, init_strategy=init_strategy
            )
        if not init_params:
            raise UnsupportedModelError("The model has no latent sample sites.")
        sites = [(name, value.shape) for name, value in init_params.items()]

        def single(z: torch.Tensor) -> torch.Tensor:
            unconstrained = _unpack(z, sites)
            constrained = {k: transforms[k].inv(v) for k, v in unconstrained.items()}
            trace = poutine.trace(poutine.condition(model, constrained)).get_trace(
                *model_args, **model_kwargs
            )
            log_joint = trace.log_prob_sum()
            for name, value in unconstrained.items():
                log_joint = (
                    log_joint
                    - transforms[name].log_abs_det_jacobian(constrained[name], value).sum()
                )
            return log_joint

        vmapped = torch.func.vmap(single, chunk_size=vmap_chunk_size)

        def batched(z: torch.Tensor) -> torch.Tensor:
            with pyro.validation_enabled(False):
                return vmapped(z)

        def looped(z: torch.Tensor) -> torch.Tensor:
            return torch.stack([single(row) for row in z])

        initial = torch.cat([init_params[name].reshape(-1) for name, _ in sites])
        noise = torch.randn(initial.shape, generator=torch.Generator().manual_seed(0))
        probe = torch.stack([initial, initial + 0.1 * noise])  # the caller's RNG untouched
        expected = torch.stack([-potential_fn(_unpack(row, sites)) for row in probe]).detach()
        if not torch.allclose(looped(probe).detach(), expected, rtol=1e-4, atol=1e-4):
            raise UnsupportedModelError(
                "The model's log density at fixed latent values differs from the potential "
                "energy of pyro.infer.mcmc.util.initialize_model; the log joint must be a "
                "deterministic function of the latent sites (no randomness outside "
                "pyro.sample sites, no sites that change between runs)."
            )
        chosen = batched
        try:
            ok = torch.allclose(batched(probe).detach(), expected, rtol=1e-4, atol=1e-4)
        except Exception as error:  # any failure means vmap cannot be used
            ok, reason = False, "{}: {}".format(type(error).__name__, error)
        else:
            reason = "vmapped values differ from potential_fn"
        if not ok:
            warnings.warn(
                "The model could not be evaluated with torch.func.vmap ({}); particles are "
                "evaluated one at a time, which is slow. Data-dependent Python control flow "
                "(if on a tensor, .item()) is the usual cause.".format(reason),
                stacklevel=2,
            )
            chosen = looped
        return cls(chosen, initial.numel(), sites=sites, transforms=transforms, initial=initial)

    @classmethod
    def from_log_density(
        cls, log_density: Callable[[torch.Tensor], torch.Tensor], dim: int, *, batched: bool = True
    ) -> ContinuousTarget:
        """A plain unnormalised log density on :math:`\\mathbb{R}^{dim}`.

        :param callable log_density: maps ``[..., dim]`` to ``[...]`` (or ``[dim]`` to a
            scalar with ``batched=False``).
        :param int dim: dimension.
        :param bool batched: whether ``log_density`` already handles leading batch
            dimensions; if not it is wrapped in :func:`torch.func.vmap`.
        """
        fn = log_density if batched else torch.func.vmap(log_density)
        out = fn(torch.zeros(2, dim))
        if out.shape != (2,):
            raise ValueError(
                "log_density maps a batch of shape [2, {}] to shape {}; it must return one "
                "value per point, shape [2]. Sum over the last dimension (x.sum(-1)), or pass "
                "batched=False to have it vmapped.".format(dim, tuple(out.shape))
            )
        return cls(fn, dim)

    # ------------------------------------------------------------------ evaluation
    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        flat = z.reshape(-1, self.dim)
        self.num_evaluations += flat.shape[0]
        return self._log_density(flat).reshape(z.shape[:-1])

    def value_and_grad(
        self, z: torch.Tensor, create_graph: bool = False
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Log density and its gradient at ``z``.

        :param torch.Tensor z: points, shape ``[..., dim]``.
        :param bool create_graph: keep the graph of both results (for gradients that
            flow through them, as UHA's reparameterised bound needs); otherwise both are
            detached.
        :returns: ``(value [...], grad [..., dim])``.
        """
        with torch.enable_grad():
            if not (create_graph and z.requires_grad):
                z = z.detach().requires_grad_(True)
            value = self(z)
            (grad,) = torch.autograd.grad(value.sum(), z, create_graph=create_graph)
        self.num_gradients += value.numel()
        if not create_graph:
            value = value.detach()
        return value, grad

    def constrain(self, z: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Site values in constrained space, each of shape ``z.shape[:-1] + site shape``
        (a plain density: ``{"z": z}``).

        :param torch.Tensor z: unconstrained points, shape ``[..., dim]``.
        """
        if self.sites is None:
            return {"z": z}
        return {name: self.transforms[name].inv(v) for name, v in _unpack(z, self.sites).items()}


def _unpack(z: torch.Tensor, sites: List[Tuple[str, torch.Size]]) -> Dict[str, torch.Tensor]:
    """Split flat vectors ``[..., d]`` into per-site tensors ``[..., *shape]``."""
    sizes = [max(1, math.prod(shape)) for _, shape in sites]
    parts = torch.split(z, sizes, dim=-1)
    return {name: part.reshape(z.shape[:-1] + shape) for (name, shape), part in zip(sites, parts)}


def as_target(
    target,
    model_args: tuple = (),
    model_kwargs: Optional[dict] = None,
    dim: Optional[int] = None,
) -> ContinuousTarget:
    """A :class:`ContinuousTarget` from a target, a batched log density (when ``dim`` is
    given) or a Pyro model (otherwise).

    :param target: a :class:`ContinuousTarget`, a log density or a Pyro model.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param int dim: the dimension of a plain log density.
    """
    if isinstance(target, ContinuousTarget):
        return target
    if dim is not None:
        return ContinuousTarget.from_log_density(target, dim)
    if not callable(target):
        raise TypeError("target must be a Pyro model or a log density, got {!r}".format(target))
    return ContinuousTarget.from_model(target, model_args, model_kwargs)

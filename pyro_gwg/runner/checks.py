"""Checks of the arguments of :class:`pyro_gwg.MCMC`: each wrong argument is refused
with a ``TypeError`` or ``ValueError`` that names it, when the runner is built (or,
for site names, when the run has the model's sites)."""

from __future__ import annotations

import numbers
from typing import Dict, List, Mapping, Optional, Sequence

import torch

from pyro_gwg.bridge.density import ModelDensity

__all__ = [
    "block_params",
    "check_device",
    "check_initial_params",
    "check_save_params",
    "check_site_names",
    "check_transforms",
]


def check_device(device) -> Optional[torch.device]:
    """``device`` as a :class:`torch.device` (``None`` stays ``None``)."""
    if device is None:
        return None
    if isinstance(device, bool) or not isinstance(device, (str, numbers.Integral, torch.device)):
        raise TypeError(
            "device must be a torch.device, a string such as 'cpu' or 'cuda:0', a CUDA "
            "device index or None; got {!r} of type {}.".format(device, type(device).__name__)
        )
    try:
        result = torch.device(device if isinstance(device, (str, torch.device)) else int(device))
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            "device {!r} is not a torch device; use for example 'cpu', 'cuda' or 'cuda:0'.".format(
                device
            )
        ) from None
    if result.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "device {!r} asks for a GPU, but CUDA is not available to this PyTorch; use "
            "device='cpu' or None.".format(device)
        )
    return result


def check_transforms(transforms) -> Dict:
    """``{}`` for ``None`` or an empty dict: discrete sites have no transforms."""
    if transforms is None:
        return {}
    if not isinstance(transforms, Mapping):
        raise TypeError(
            "transforms must be a dict {{site name: transform}} or None, got {}.".format(
                type(transforms).__name__
            )
        )
    if transforms:
        raise ValueError(
            "transforms has an entry for {}, but pyro_gwg.MCMC samples discrete sites, "
            "which have no transforms to an unconstrained space: their values are stored "
            "as they are. Pass transforms=None (or {{}}).".format(", ".join(map(repr, transforms)))
        )
    return {}


def check_save_params(save_params) -> Optional[List[str]]:
    """``save_params`` as a list of site names (checked against the latent sites at
    the start of the run)."""
    if save_params is None:
        return None
    if isinstance(save_params, str) or not isinstance(save_params, (list, tuple)):
        raise TypeError(
            "save_params must be a list of site names such as ['x'], or None; got {!r}.".format(
                save_params
            )
        )
    bad = [name for name in save_params if not isinstance(name, str)]
    if bad:
        raise TypeError("save_params must hold site names (strings), got {!r}.".format(bad[0]))
    if not save_params:
        raise ValueError(
            "save_params is empty: no site would be saved. Name at least one latent "
            "site, or pass None to save all of them."
        )
    return list(save_params)


def check_initial_params(initial_params, num_chains: int) -> Optional[Dict[str, torch.Tensor]]:
    """``initial_params`` as tensors with a leading chain dimension of ``num_chains``
    (for one chain, also without it, as :class:`pyro.infer.MCMC` takes them)."""
    if initial_params is None:
        return None
    if not isinstance(initial_params, Mapping):
        raise TypeError(
            "initial_params must be a dict {{site name: initial values, one per chain}}, "
            "got {}.".format(type(initial_params).__name__)
        )
    out = {}
    for name, value in initial_params.items():
        if not isinstance(name, str):
            raise TypeError(
                "initial_params keys must be site names (strings), got {!r}.".format(name)
            )
        if not isinstance(value, torch.Tensor):
            try:
                value = torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(
                    "initial_params['{}'] must be a tensor, a numpy array or a nested list "
                    "of numbers, got {!r} of type {}.".format(name, value, type(value).__name__)
                ) from None
        if num_chains == 1:  # its shape is checked against the site's at setup
            out[name] = value
            continue
        if value.dim() == 0:
            raise ValueError(
                "initial_params['{}'] is a scalar; it needs a leading (chain) dimension of "
                "size num_chains={}.".format(name, num_chains)
            )
        if value.shape[0] != num_chains:
            raise ValueError(
                "initial_params['{}'] has a leading (chain) dimension of size {}, but "
                "num_chains={}: give every site one initial value per chain, shaped "
                "[num_chains, *value_shape].".format(name, value.shape[0], num_chains)
            )
        out[name] = value
    return out


def block_params(initial_params, block: slice, num_chains: int):
    """The initial values of a block of chains; a block that is the whole run takes
    them as given (one chain's values may come without their chain dimension, as in
    :class:`pyro.infer.MCMC`: the kernel tells them apart by the sites' shapes)."""
    if initial_params is None or (block.start == 0 and block.stop == num_chains):
        return initial_params
    return {k: v[block] for k, v in initial_params.items()}


def check_site_names(
    energy: Optional[ModelDensity],
    initial_params: Optional[Mapping],
    save_params: Optional[List[str]],
    continuous: Sequence[str] = (),
) -> None:
    """Refuse ``initial_params`` and ``save_params`` that name no latent site of
    ``energy`` (``None``: no discrete sites) nor one of the ``continuous`` sites of
    the run (a :class:`~pyro_gwg.MixedGibbs` or HMC/NUTS run)."""
    names = [site.name for site in energy.sites] if energy is not None else []
    names += list(continuous)
    for argument, given, fix in (
        ("initial_params has a value for", initial_params, "Remove it."),
        ("save_params names", save_params, "Save only latent sites."),
    ):
        unknown = [name for name in given or () if name not in names]
        if unknown:
            raise ValueError(
                "{} {}, which is not a latent {}site sampled by the kernel "
                "(latent sites: {}). {}".format(
                    argument,
                    ", ".join(map(repr, unknown)),
                    "" if continuous else "discrete ",
                    ", ".join(map(repr, names)),
                    fix,
                )
            )

"""Refusal of the site kinds a kernel does not sample, with a message that says which."""

from __future__ import annotations

from pyro_gwg.sites import UnsupportedModelError

__all__ = ["check_supported_coordinates"]


def check_supported_coordinates(kernel_name: str, layout, bounded_ordinals: bool) -> None:
    """Refuse a layout with ordinal coordinates the kernel does not sample: every
    ordinal but bits, or (``bounded_ordinals``) those with an infinite support.

    :param str kernel_name: the kernel, for the message.
    :param layout: the :class:`~pyro_gwg.proposals.layout.CoordinateLayout`.
    :param bool bounded_ordinals: whether ordinals with a finite support are sampled.
    :raises UnsupportedModelError: naming the first refused coordinate.
    """
    if bounded_ordinals:
        supported = layout.upper < float("inf")
        kinds = "binary, categorical and bounded ordinal sites"
    else:
        supported = (layout.lower == 0) & (layout.upper == 1)
        kinds = "binary and categorical sites"
    refused = layout.is_scalar & ~supported
    if bool(refused.any()):
        first = int(refused.nonzero()[0])
        raise UnsupportedModelError(
            "{} samples {}; {} of the model's coordinates are ordinals it does not "
            "sample (the first, coordinate {}, ranges over [{:g}, {:g}]). Use GWG or "
            "PAFS for such sites.".format(
                kernel_name,
                kinds,
                int(refused.sum()),
                first,
                float(layout.lower[first]),
                float(layout.upper[first]),
            )
        )

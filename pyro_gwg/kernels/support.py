"""Refusal of the site kinds a kernel does not sample, with a message that says which."""

from __future__ import annotations

from pyro_gwg.sites import UnsupportedModelError

__all__ = ["check_supported_coordinates"]


def check_supported_coordinates(kernel_name: str, layout) -> None:
    """Refuse a layout with ordinal coordinates of infinite support (Poisson,
    Geometric, ...), which the kernel does not sample.

    :param str kernel_name: the kernel, for the message.
    :param layout: the :class:`~pyro_gwg.proposals.layout.CoordinateLayout`.
    :raises UnsupportedModelError: naming the first refused coordinate.
    """
    refused = layout.is_scalar & ~(layout.upper < float("inf"))
    if bool(refused.any()):
        first = int(refused.nonzero()[0])
        raise UnsupportedModelError(
            "{} samples binary, categorical and bounded ordinal sites; {} of the model's "
            "coordinates are ordinals it does not sample (the first, coordinate {}, ranges "
            "over [{:g}, {:g}]). Use GWG, PAS or PAFS for such sites.".format(
                kernel_name,
                int(refused.sum()),
                first,
                float(layout.lower[first]),
                float(layout.upper[first]),
            )
        )

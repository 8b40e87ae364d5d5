"""The draws of a run: integer codes, per-draw statistics, decoding and summaries.

A run of :class:`pyro_gwg.MCMC` stores its draws as integer codes in preallocated
buffers (:class:`DrawBuffers`: the smallest integer type that holds the model's values,
thinned as they are stored) and hands them over as a :class:`Draws` object, which
stays codes: :meth:`Draws.samples` decodes them to model values when asked,
:data:`DECODE_ELEMENTS` codes at a time, so that neither the run nor the decoding
holds more than the codes, the decoded values and a small work buffer.
:meth:`Draws.diagnostics` and :meth:`Draws.summary` compute their columns a few
coordinates at a time in the same way.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from itertools import product
from typing import Dict, List, Mapping, Optional, Sequence, Union

import torch
from pyro.ops.stats import hpdi

from pyro_gwg.bridge.density import ModelDensity
from pyro_gwg.diagnostics import site_diagnostics
from pyro_gwg.sites import ONE_HOT

__all__ = [
    "DECODE_ELEMENTS",
    "DrawBuffers",
    "Draws",
    "SavedSites",
    "smallest_int_dtype",
    "statistics_of",
]

#: stored codes decoded (or checked, or summarised) at once: bounds the work buffers
#: of :meth:`Draws.samples`, :meth:`Draws.diagnostics` and :meth:`Draws.summary`
#: (an int64 copy of this many codes is 8 MiB)
DECODE_ELEMENTS = 2**20


def smallest_int_dtype(low: float, high: float) -> torch.dtype:
    """The smallest signed integer type holding every integer in ``[low, high]`` (int64
    if none does, e.g. for an unbounded range).

    :param float low: least value.
    :param float high: largest value.
    :rtype: torch.dtype
    """
    for dtype in (torch.int8, torch.int16, torch.int32):
        info = torch.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return torch.int64


def code_dtype(layout) -> torch.dtype:
    """Smallest integer type holding every code of the layout (int64 if unbounded).

    :param layout: a :class:`~pyro_gwg.proposals.layout.CoordinateLayout`.
    :rtype: torch.dtype
    """
    low = float(torch.where(layout.is_scalar, layout.lower, 0.0).min())
    high = float(torch.where(layout.is_scalar, layout.upper, layout.num_categories - 1.0).max())
    return smallest_int_dtype(low, high)


class SavedSites:
    """The sites of ``energy`` named in ``names`` (in the energy's order), numbered for
    codes that hold only their coordinates (``columns`` of the full codes); decodes
    such codes as :meth:`ModelDensity.values_from_codes` decodes full ones.

    :param ModelDensity energy: the model's density (``None`` for a run without
        discrete sites: no sites).
    :param list names: the saved sites.
    """

    def __init__(self, energy: Optional[ModelDensity], names: List[str]) -> None:
        self.sites, columns, offset = [], [], 0
        for site in energy.sites if energy is not None else ():
            if site.name in names:
                columns.append(torch.arange(site.offset, site.offset + site.num_coords))
                self.sites.append(dataclasses.replace(site, offset=offset))
                offset += site.num_coords
        self.columns = torch.cat(columns) if columns else torch.zeros(0, dtype=torch.long)

    def values_from_codes(self, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Model values ``{name: [N, *value_shape]}`` of codes ``[N, D_saved]``."""
        return {
            site.name: site.values_from_codes(
                codes[:, site.offset : site.offset + site.num_coords].reshape(
                    (-1,) + site.coord_shape
                )
            )
            for site in self.sites
        }


#: what decodes the stored codes: the model's density, or its saved sites
Decoder = Union[ModelDensity, SavedSites]


def saved(energy: Optional[ModelDensity], save_params: Optional[List[str]]) -> Decoder:
    """The decoder of the codes a run with ``save_params`` stores (``energy`` is
    ``None`` for a run without discrete sites)."""
    if energy is None:
        return SavedSites(None, [])
    return energy if save_params is None else SavedSites(energy, save_params)


def statistics_of(info) -> Dict[str, torch.Tensor]:
    """The statistics of a run of transitions as a dict: a kernel's ``info`` (a named
    tuple) or the dict of a :class:`~pyro_gwg.kernels.mixed.MixedRun`."""
    return dict(info) if isinstance(info, Mapping) else info._asdict()


class Draws:
    """The draws of a run: integer codes ``[C, T, D]`` (``D`` the coordinates of the
    saved discrete sites), the values of the saved continuous sites (a
    :class:`~pyro_gwg.MixedGibbs` or HMC/NUTS run), the kernel's per-draw statistics
    ``{name: [C, T]}`` and the sites that decode the codes. :class:`pyro_gwg.MCMC`
    returns its results from it (:attr:`MCMC.draws <pyro_gwg.mcmc.MCMC.draws>`), and so
    do :func:`~pyro_gwg.to_inference_data` and :func:`~pyro_gwg.typed_samples`.

    :param torch.Tensor codes: integer codes ``[C, T, D]``.
    :param dict statistics: ``{name: [C, T]}``.
    :param decoder: the :class:`~pyro_gwg.ModelDensity` of the model, or the
        :class:`SavedSites` of a run with ``save_params``.
    :param dict continuous: ``{site: [C, T, *value_shape]}``, the model (constrained)
        values of the continuous sites, as :class:`pyro.infer.MCMC` returns them.
    """

    def __init__(
        self,
        codes: torch.Tensor,
        statistics: Mapping[str, torch.Tensor],
        decoder: Decoder,
        continuous: Optional[Mapping[str, torch.Tensor]] = None,
    ) -> None:
        self.codes = codes
        self.statistics = dict(statistics)
        self.decoder = decoder
        self.continuous = dict(continuous or {})

    @property
    def num_chains(self) -> int:
        return self.codes.shape[0]

    @property
    def num_draws(self) -> int:
        """Draws per chain."""
        return self.codes.shape[1]

    @property
    def sites(self) -> list:
        """The saved sites (:class:`~pyro_gwg.sites.SiteCoding`), in the model's order."""
        return self.decoder.sites

    def samples(
        self, num_samples: Optional[int] = None, group_by_chain: bool = False
    ) -> Dict[str, torch.Tensor]:
        """Model values ``{site: [C, T, ...]}`` (or flattened over chains), decoded from
        the codes (see :meth:`pyro_gwg.MCMC.get_samples <pyro_gwg.mcmc.MCMC.get_samples>`).

        :param int num_samples: draw this many samples with replacement; only those
            are decoded.
        :param bool group_by_chain: keep the chain dimension.
        """
        codes, continuous = self.codes, self.continuous
        num_chains, num_draws = codes.shape[:2]
        if num_samples is None:
            values = {**_decode(self.decoder, codes), **continuous}
        elif group_by_chain:
            index = torch.randint(0, num_draws, (num_samples,), device=codes.device)
            values = _decode(self.decoder, codes[:, index])
            values.update({k: v[:, index.to(v.device)] for k, v in continuous.items()})
        else:
            index = torch.randint(0, num_chains * num_draws, (num_samples,))
            index = index.to(codes.device)
            chosen = codes[index // num_draws, index % num_draws]
            values = {k: v[0] for k, v in _decode(self.decoder, chosen.unsqueeze(0)).items()}
            for k, v in continuous.items():
                at = index.to(v.device)
                values[k] = v[at // num_draws, at % num_draws]
            return values
        if not group_by_chain:
            values = {k: v.reshape((-1,) + v.shape[2:]) for k, v in values.items()}
        return values

    def integer_samples(self) -> Dict[str, torch.Tensor]:
        """Draws ``{site: [C, T, *value_shape]}`` as integers of the smallest type that
        holds them (``int8`` for a one-hot site's vectors), copied from the codes a block
        of draws at a time."""
        codes = self.codes
        num_chains, num_draws = codes.shape[:2]
        out = {}
        for site in self.decoder.sites:
            own = codes[:, :, site.offset : site.offset + site.num_coords]
            if site.kind == ONE_HOT:
                dtype, width = torch.int8, site.num_categories
                categories = torch.arange(width, device=codes.device, dtype=codes.dtype)
            else:
                dtype, width = smallest_int_dtype(float(own.min()), float(own.max())), 1
            value = torch.empty(
                (num_chains, num_draws) + tuple(site.value_shape), dtype=dtype, device=codes.device
            )
            step = max(1, DECODE_ELEMENTS // max(1, num_chains * site.num_coords * width))
            for start in range(0, num_draws, step):
                block = own[:, start : start + step]
                if site.kind == ONE_HOT:
                    block = block.unsqueeze(-1) == categories
                value[:, start : start + step] = block.to(dtype).reshape(
                    block.shape[:2] + tuple(site.value_shape)
                )
            out[site.name] = value
        return out

    def chain_statistics(self) -> Dict[str, Dict[str, object]]:
        """``{statistic: {"chain i": value}}`` of the kernel, the acceptance rate per
        chain and an empty ``divergences`` list per chain (no site diagnostics)."""
        chains = ["chain {}".format(c) for c in range(self.num_chains)]
        out: Dict[str, Dict[str, object]] = OrderedDict()
        for name, value in self.statistics.items():
            if name != "diverging":
                out[name] = dict(zip(chains, value.cpu()))
        for name, value in self.statistics.items():  # "accepted", "discrete accepted"
            if name.rpartition(" ")[2] == "accepted":
                rates = value.float().mean(-1).tolist()
                out[name[: -len("accepted")] + "acceptance rate"] = dict(zip(chains, rates))
        # the draws of HMC/NUTS transitions that diverged, as Pyro lists them
        diverging = self.statistics.get("diverging")
        out["divergences"] = {
            c: [] if diverging is None else diverging[i].nonzero().reshape(-1).tolist()
            for i, c in enumerate(chains)
        }
        return out

    def diagnostics(self) -> Dict[str, Dict[str, object]]:
        """``{"n_eff": ..., "r_hat": ...}`` per site, then :meth:`chain_statistics` (see
        :meth:`pyro_gwg.MCMC.diagnostics <pyro_gwg.mcmc.MCMC.diagnostics>`)."""
        diag: Dict[str, Dict[str, object]] = OrderedDict()
        for name, columns in self.site_table(summary=False).items():
            diag[name] = columns
        diag.update(self.chain_statistics())
        return diag

    def summary(self, prob: float = 0.9) -> None:
        """Print Pyro's summary table (see :meth:`pyro_gwg.MCMC.summary
        <pyro_gwg.mcmc.MCMC.summary>`).

        :param float prob: the probability mass of the credible interval, in (0, 1).
        """
        categorical = {site.name for site in self.decoder.sites if site.kind == "categorical"}
        _print_table(self.site_table(summary=True, prob=prob), categorical)

    def site_table(self, summary: bool, prob: float = 0.9):
        """``{site: OrderedDict(column: tensor of the value shape)}``: n_eff and r_hat,
        and with ``summary`` also mean, std, median and the HPD interval, computed on a
        few coordinates at a time.

        :param bool summary: add the summary columns.
        :param float prob: the probability mass of the HPD interval.
        """
        codes = self.codes
        num_chains, num_draws = codes.shape[:2]
        dtype = torch.get_default_dtype()
        table = OrderedDict()
        for site in self.decoder.sites:
            # the summary of a Categorical site: the indicator of each category
            categories = site.num_categories if summary and site.kind == "categorical" else 0
            width = site.num_categories if site.kind == ONE_HOT or categories else 1
            per_coord = max(1, DECODE_ELEMENTS // max(1, num_chains * num_draws * width))
            columns: Dict[str, List[torch.Tensor]] = OrderedDict()
            for start in range(0, site.num_coords, per_coord):
                stop = min(site.num_coords, start + per_coord)
                block = codes[:, :, site.offset + start : site.offset + stop].long()
                values = site.values_from_codes(block)
                if categories:
                    values = values.unsqueeze(-1) == torch.arange(categories, device=values.device)
                values = values.to(dtype).reshape(num_chains, num_draws, -1)
                del block
                for key, value in _columns(values, summary, prob).items():
                    columns.setdefault(key, []).append(value)
            shape = site.value_shape + ((categories,) if categories else ())
            table[site.name] = OrderedDict(
                (key, torch.cat(parts).reshape(shape)) for key, parts in columns.items()
            )
        for name, value in self.continuous.items():
            values = value.to(dtype).reshape(num_chains, num_draws, -1)
            table[name] = OrderedDict(
                (key, column.reshape(value.shape[2:]))
                for key, column in _columns(values, summary, prob).items()
            )
        return table


class DrawBuffers:
    """Preallocated ``[C, num_kept, ...]`` buffers of the kept draws (codes, only the
    coordinates of the saved sites; the values of the saved continuous sites) and of
    the per-draw statistics, filled on the device from runs of transitions; ``kept``
    counts the draws stored per chain.

    :param int num_chains: chains of the run.
    :param int num_kept: draws kept per chain.
    :param int thinning: keep every ``thinning``-th draw.
    :param torch.dtype code_dtype: integer type of the stored codes.
    :param device: where the buffers are.
    :param decoder: the model's density, or its saved sites (only their coordinates
        are stored).
    :param list continuous: the continuous sites whose values are stored.
    """

    def __init__(
        self,
        num_chains: int,
        num_kept: int,
        thinning: int,
        code_dtype: torch.dtype,
        device: torch.device,
        decoder: Decoder,
        continuous: Sequence[str] = (),
    ) -> None:
        self.num_kept, self.thinning, self.code_dtype = num_kept, thinning, code_dtype
        self.decoder = decoder
        # the coordinates stored (None: all)
        columns = getattr(decoder, "columns", None)
        self.columns = None if columns is None else columns.to(device)
        num_coords = decoder.num_coords if columns is None else columns.numel()
        self.codes = torch.empty(
            (num_chains, num_kept, num_coords), dtype=code_dtype, device=device
        )
        self.stats: Dict[str, torch.Tensor] = {}
        self.continuous_names = tuple(continuous)
        self.continuous: Dict[str, torch.Tensor] = {}
        self.kept = [0] * num_chains

    def store(
        self,
        first: int,
        info,
        codes: torch.Tensor,
        log_joint: Optional[torch.Tensor],
        chains: slice,
        continuous: Optional[Mapping[str, torch.Tensor]] = None,
    ) -> None:
        """Keep the thinned draws among the draws ``first, first + 1, ...`` (after
        warmup) of a run of transitions of ``chains``; ``codes [c, n, D]``, the
        statistics (``info``, see :func:`statistics_of`, and ``log_joint``, or
        ``None``) ``[c, n]``, the continuous values ``{site: [c, n, ...]}``."""
        thin = self.thinning
        offset = -(first + 1) % thin  # run position of the first draw j with (j + 1) % thin == 0
        slot = (first + offset) // thin
        count = min(len(range(offset, codes.shape[1], thin)), self.num_kept - slot)
        if count <= 0:
            return
        kept = slice(offset, offset + thin * (count - 1) + 1, thin)
        block = codes[:, kept]
        if self.columns is not None:
            block = block.index_select(-1, self.columns)
        self.codes[chains, slot : slot + count] = block
        stats = statistics_of(info)
        if log_joint is not None:
            stats["log_joint"] = log_joint
        values = {n: v for n, v in (continuous or {}).items() if n in self.continuous_names}
        for buffers, new in ((self.stats, stats), (self.continuous, values)):
            for name, value in new.items():
                if name not in buffers:
                    buffers[name] = value.new_empty(
                        (self.codes.shape[0], self.num_kept) + tuple(value.shape[2:])
                    )
                buffers[name][chains, slot : slot + count] = value[:, kept]
        for c in range(chains.start, chains.stop):
            self.kept[c] = slot + count

    def draws(self, num_chains: Optional[int] = None, num_draws: Optional[int] = None) -> Draws:
        """The first ``num_draws`` draws of the first ``num_chains`` chains (default:
        all) as :class:`Draws`."""
        chains, kept = slice(num_chains), slice(num_draws)
        stats = {k: v[chains, kept] for k, v in self.stats.items()}
        continuous = {k: v[chains, kept] for k, v in self.continuous.items()}
        return Draws(self.codes[chains, kept], stats, self.decoder, continuous)


def _decode(decoder: Decoder, codes: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Model values ``{name: [C, T, *value_shape]}`` of codes ``[C, T, D]``, decoded
    :data:`DECODE_ELEMENTS` codes at a time into preallocated tensors."""
    num_chains, num_draws, num_coords = codes.shape
    if not decoder.sites:  # (a run of HMC/NUTS alone)
        return {}
    rows = max(1, DECODE_ELEMENTS // max(1, num_coords))  # draws per block
    chains_per_block = max(1, rows // max(1, num_draws))
    draws_per_block = num_draws if chains_per_block > 1 else min(rows, num_draws)
    out: Dict[str, torch.Tensor] = {}
    for c0 in range(0, num_chains, chains_per_block):
        c1 = min(num_chains, c0 + chains_per_block)
        for t0 in range(0, num_draws, draws_per_block):
            t1 = min(num_draws, t0 + draws_per_block)
            block = codes[c0:c1, t0:t1].reshape(-1, num_coords).long()
            for name, value in decoder.values_from_codes(block).items():
                if name not in out:
                    shape = (num_chains, num_draws) + tuple(value.shape[1:])
                    out[name] = torch.empty(shape, dtype=value.dtype, device=value.device)
                out[name][c0:c1, t0:t1] = value.reshape((c1 - c0, t1 - t0) + value.shape[1:])
    return out


def _columns(values: torch.Tensor, summary: bool, prob: float) -> Dict[str, torch.Tensor]:
    """Summary columns of ``values [C, T, n]``, each ``[n]``."""
    out = OrderedDict()
    if summary:
        flat = values.reshape((-1,) + values.shape[2:])
        low, high = hpdi(flat, prob=prob)
        out["mean"] = flat.mean(0)
        out["std"] = flat.std(0) if flat.shape[0] > 1 else torch.full_like(flat[0], float("nan"))
        out["median"] = flat.median(0).values
        out["{:.1f}%".format(50 * (1 - prob))] = low
        out["{:.1f}%".format(50 * (1 + prob))] = high
    out.update(site_diagnostics(values))
    return out


def _print_table(
    table: Mapping[str, Mapping[str, torch.Tensor]], categorical: Sequence[str] = ()
) -> None:
    """Print ``{site: {column: tensor}}`` in the format of Pyro's ``print_summary``;
    the last dimension of a site named in ``categorical`` is its category (rows
    ``z[0]=k``)."""
    if not table:
        return
    rows = []
    for name, stats in table.items():
        for index in product(*map(range, stats["mean"].shape)):
            position, suffix = index, ""
            if name in categorical:
                position, suffix = index[:-1], "={}".format(index[-1])
            label = name + ("[{}]".format(",".join(map(str, position))) if position else "")
            rows.append([label + suffix] + [float(v[index]) for v in stats.values()])
    name_format = "{:>" + str(max(max(len(row[0]) for row in rows), 10)) + "}"
    columns = [""] + list(next(iter(table.values())).keys())
    print()
    print((name_format + " {:>9}" * (len(columns) - 1)).format(*columns))
    row_format = name_format + " {:>9.2f}" * (len(columns) - 1)
    for row in rows:
        print(row_format.format(*row))
    print()

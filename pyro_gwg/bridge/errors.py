"""The wording of the bridge's errors: descriptions of states, bounds and shapes, the
messages of a failed log-probability and of a model whose sites or supports change,
and what tells an allocation failure apart (it must surface as it is)."""

from __future__ import annotations

from typing import Dict, Optional

import torch

from pyro_gwg.sites import DiscreteSite, UnsupportedModelError, unwrap_distribution

__all__ = [
    "TORCH_OOM",
    "describe_bound",
    "describe_shape",
    "describe_values",
    "first_line",
    "format_values",
    "log_prob_failure",
    "note_model_error",
    "out_of_memory",
    "structure_error",
    "support_error",
]

#: torch's allocation failure (``torch.cuda.OutOfMemoryError`` before torch 2.5)
TORCH_OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation failure (which must surface, never be taken
    for a model that does not broadcast)."""
    if isinstance(error, (MemoryError, TORCH_OOM)):
        return True
    text = str(error)
    return "can't allocate memory" in text or "out of memory" in text.lower()


def describe_bound(bound: torch.Tensor) -> str:
    """A support bound: one number where every element agrees, else its values."""
    if bound.numel() and bool((bound == bound.reshape(-1)[0]).all()):
        return "{:g}".format(float(bound.reshape(-1)[0]))
    text = str(bound.tolist())
    return text if len(text) <= 60 else text[:57] + "..."


def describe_shape(entry: tuple) -> str:
    """``(3,)``, or ``() with 2 categories``: an entry of the latent signature."""
    shape, categories = entry
    return str(shape) if categories is None else "{} with {} categories".format(shape, categories)


def first_line(error: BaseException) -> str:
    """The first line of an error's message."""
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def format_values(values: torch.Tensor) -> str:
    """``[1.5, -2]``: log densities, six significant digits each."""
    return "[{}]".format(", ".join("{:.6g}".format(float(v)) for v in values.reshape(-1)))


def describe_values(values: Dict[str, torch.Tensor], index: Optional[int] = None) -> str:
    """``{'x': [0, 1], 'n': 3}``-style description of (one state of) site values."""
    parts = []
    for name, value in values.items():
        value = torch.as_tensor(value)
        if index is not None:
            value = value[index]
        value = value.detach()
        if value.is_floating_point() and bool((value == value.round()).all()):
            value = value.long()
        text = str(value.tolist())
        parts.append("'{}': {}".format(name, text if len(text) <= 80 else text[:77] + "..."))
    return "{" + ", ".join(parts) + "}"


def log_prob_failure(site, error: BaseException, latent) -> str:
    """The message for a site whose ``log_prob`` raised ``error`` (``latent``: the
    names of the latent sites), with a hint for an integer observation."""
    value = site["value"]
    observed = site["is_observed"] and site["name"] not in latent
    dist_name = type(unwrap_distribution(site["fn"])).__name__
    hint = ""
    if (
        isinstance(value, torch.Tensor)
        and not value.is_floating_point()
        and not isinstance(unwrap_distribution(site["fn"]), torch.distributions.Categorical)
    ):
        hint = (
            " The {}value has the integer dtype {}, and {}.log_prob needs a floating-point "
            "value: pass it as a float tensor (e.g. obs=y.float()).".format(
                "observed " if observed else "", value.dtype, dist_name
            )
        )
    return (
        "Computing the log-probability of {}site '{}' ({}) failed at a value of dtype {} "
        "and shape {}: {}: {}.{}"
    ).format(
        "observed " if observed else "latent ",
        site["name"],
        dist_name,
        getattr(value, "dtype", type(value).__name__),
        tuple(getattr(value, "shape", ())),
        type(error).__name__,
        first_line(error),
        hint,
    )


def note_model_error(error: BaseException) -> None:
    """Add a note to an error raised inside the model (where Python has ``add_note``)."""
    note = "(raised while pyro-gwg ran the model)"
    if hasattr(error, "add_note") and note not in getattr(error, "__notes__", ()):
        error.add_note(note)


def support_error(
    site: DiscreteSite, varying, sources, reference, found, values
) -> UnsupportedModelError:
    """The error for latent site ``site`` whose support bounds ``varying`` (computed
    from the latent sites ``sources``) are ``found`` at the state ``values`` and
    ``reference`` at the initial state (both ``{site: {bound: value}}``)."""
    name = site.name
    sources = frozenset().union(*(sources[k] for k in varying))
    return UnsupportedModelError(
        "The support of latent site {} depends on the values of other latent "
        "sites: its {} computed from latent site(s) {} and changes with them ({} at "
        "the initial state, {} at the state {}). The kernels move every latent site "
        "within one fixed support, so this model would be sampled wrongly. Give '{}' "
        "a fixed support that covers every case (for example Binomial(n_max, p), or "
        "a Categorical over 0 .. n_max) and add the dependence as a pyro.factor that "
        "is -inf where the value is impossible (e.g. torch.where(x <= n, 0.0, "
        "-inf)).".format(
            site.describe(),
            " and ".join("{} is".format(k.strip("_").replace("_", " ")) for k in varying),
            ", ".join("'{}'".format(s) for s in sorted(sources)),
            " and ".join(describe_bound(reference[name][k]) for k in varying),
            " and ".join(describe_bound(found[name][k]) for k in varying),
            describe_values({k: v for k, v in values.items() if k in sources}),
            name,
        )
    )


def structure_error(
    expected: tuple, signature: tuple, values, num_chains: int, value_reads
) -> UnsupportedModelError:
    """The error for a trace whose latent sites (its ``signature``, see
    :meth:`~pyro_gwg.bridge.checks.StructureChecks._latent_signature`) differ from the
    first trace's (``expected``), at the state ``values`` (one chain) or a batch."""
    expected, found = dict(expected), dict(signature)
    missing = [n for n in expected if n not in found]
    extra = [n for n in found if n not in expected]
    reshaped = [n for n in expected if n in found and expected[n] != found[n]]
    parts = []
    if missing:
        parts.append("site(s) {} are missing".format(", ".join(map(repr, missing))))
    if extra:
        parts.append("new site(s) {} appear".format(", ".join(map(repr, extra))))
    if reshaped:
        parts.append(
            "site(s) {} change shape".format(
                ", ".join(
                    "'{}' {} -> {}".format(n, describe_shape(expected[n]), describe_shape(found[n]))
                    for n in reshaped
                )
            )
        )
    if any(expected[n][1] != found[n][1] for n in reshaped):
        parts[-1] += (
            " (a Categorical site must keep its number of categories: give it the "
            "largest number, with logits -inf for the categories impossible at a "
            "state, e.g. torch.where(torch.arange(K_max) < k + 2, 0.0, -inf))"
        )
    state = describe_values(values) if num_chains == 1 else "a batch of states"
    reads = "; ".join(r.describe() for r in value_reads)
    return UnsupportedModelError(
        "The latent sites of the model change with the values of its latent sites: "
        "at the state {}, {}{}. The kernels need every latent site at every state, "
        "with a fixed shape. Sample every latent site on every path (use its value "
        "only where it matters, e.g. mean = x * w instead of sampling w only when "
        "x is 1), or sum the varying part out exactly.".format(
            state,
            " and ".join(parts) or "the sites differ",
            " (the model reads latent values in Python: {})".format(reads) if reads else "",
        )
    )

"""Which latent values a model reads in Python, and which tensors they flow into.

The kernels need every state of the latent discrete sites to give a trace with the
same latent sites and the same supports. A model breaks that when its Python control
flow reads a latent value (``if x.item():``, ``range(int(n))``, a plate of size ``n``)
or when a latent value flows into the support of another latent site
(``Binomial(n + 1, 0.5)`` with ``n`` latent). Both are found in one run of the model
with every latent value wrapped in :class:`Tainted`: a tensor subclass whose results
remember the sites they were computed from, and which records every read of its value
into Python and every operation whose result *shape* depends on its values (boolean
masks, ``nonzero``, ``unique``, ...). The run is eager and happens once, at set-up.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_map

__all__ = ["Read", "Tainted", "sources_of", "trace_reads", "user_location"]

# reads of a tensor's value into Python
_VALUE_READS = {
    torch.Tensor.__bool__,
    torch.Tensor.__int__,
    torch.Tensor.__float__,
    torch.Tensor.__index__,
    torch.Tensor.__complex__,
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.numpy,
    torch.Tensor.__array__,
}
# operations whose result shape depends on the values of their input
_SHAPE_FROM_VALUES = {
    torch.nonzero,
    torch.Tensor.nonzero,
    torch.argwhere,
    torch.Tensor.argwhere,
    torch.masked_select,
    torch.Tensor.masked_select,
    torch.unique,
    torch.Tensor.unique,
    torch.unique_consecutive,
    torch.Tensor.unique_consecutive,
    torch.bincount,
    torch.Tensor.bincount,
    torch.repeat_interleave,
    torch.Tensor.repeat_interleave,
}
# frames that belong to libraries, not to the user's model
_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep
    for module in (torch, __import__("pyro"), __import__("pyro_gwg"))
) + (os.path.dirname(os.__file__) + os.sep,)


@dataclass(frozen=True)
class Read:
    """A latent value read into Python (or deciding a shape) during a run of the model.

    :ivar frozenset sources: the latent sites the value was computed from.
    :ivar str operation: what read it (``__bool__``, ``item``, ``nonzero``, ...).
    :ivar str location: ``file:line`` of the model code that did it, and the line.
    """

    sources: FrozenSet[str]
    operation: str
    location: str

    def describe(self) -> str:
        return "{} of a value computed from latent site(s) {} at {}".format(
            self.operation, ", ".join("'{}'".format(s) for s in sorted(self.sources)), self.location
        )


class Tainted(torch.Tensor):
    """A tensor that remembers which latent sites it was computed from.

    Every torch operation on it returns :class:`Tainted` results carrying the union of
    the sources of its inputs, and reads of its value are recorded in the active
    recorder (see :func:`trace_reads`).
    """

    _sources: FrozenSet[str] = frozenset()
    _recorder: Optional[List[Read]] = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sources = frozenset().union(
            *(
                leaf._sources
                for leaf in tree_flatten((args, kwargs))[0]
                if isinstance(leaf, Tainted)
            )
        )
        if sources and Tainted._recorder is not None and _reads_value(func, args):
            location = _user_location()
            if location is not None:
                Tainted._recorder.append(Read(sources, _name(func), location))
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if not sources:
            return out
        return tree_map(lambda x: _taint(x, sources) if isinstance(x, torch.Tensor) else x, out)


def _name(func) -> str:
    return getattr(func, "__name__", str(func))


def _reads_value(func, args) -> bool:
    if func in _VALUE_READS or func in _SHAPE_FROM_VALUES:
        return True
    if func is torch.Tensor.__getitem__ and len(args) > 1:
        # indexing with a boolean mask: the result's shape depends on the mask's values
        return any(
            isinstance(leaf, Tainted) and leaf.dtype == torch.bool
            for leaf in tree_flatten(args[1])[0]
        )
    return False


def _user_location() -> Optional[str]:
    """``file:line (code)`` of the innermost frame outside torch, Pyro and pyro-gwg;
    ``None`` when the read comes from printing a tensor (not a structural read)."""
    stack = traceback.extract_stack()
    if any(frame.filename.endswith("_tensor_str.py") for frame in stack):
        return None
    return user_location(stack)


def user_location(frames: traceback.StackSummary) -> str:
    """``file:line (code)`` of the innermost of ``frames`` (a stack, or the traceback
    of an error) outside torch, Pyro and pyro-gwg: the line of the user's model.

    :param frames: e.g. ``traceback.extract_tb(error.__traceback__)``.
    """
    for frame in reversed(frames):
        path = os.path.abspath(frame.filename)
        if not path.startswith(_LIBRARY_DIRS) and not frame.filename.startswith("<frozen"):
            return "{}:{} ({})".format(frame.filename, frame.lineno, (frame.line or "").strip())
    return "an unknown place in the model"


def _taint(tensor: torch.Tensor, sources: FrozenSet[str]) -> torch.Tensor:
    if isinstance(tensor, Tainted):
        tensor._sources = tensor._sources | sources
        return tensor
    tainted = tensor.as_subclass(Tainted)
    tainted._sources = sources
    return tainted


def sources_of(value) -> FrozenSet[str]:
    """The latent sites a tensor (or a number) was computed from (empty if none)."""
    return value._sources if isinstance(value, Tainted) else frozenset()


def trace_reads(run: Callable[[Dict[str, torch.Tensor]], object], values: Dict[str, torch.Tensor]):
    """Run ``run(tainted_values)`` with every value tainted by its own name.

    :param callable run: runs the model conditioned on the given values; its result is
        returned as is (tainted tensors inside it can be inspected with
        :func:`sources_of`).
    :param dict values: ``{site: value}`` of the latent sites.
    :returns: ``(result, reads)``, ``reads`` the list of :class:`Read` in order.
    """
    reads: List[Read] = []
    tainted = {
        name: _taint(value.detach().clone(), frozenset([name])) for name, value in values.items()
    }
    previous, Tainted._recorder = Tainted._recorder, reads
    try:
        result = run(tainted)
    finally:
        Tainted._recorder = previous
    return result, reads

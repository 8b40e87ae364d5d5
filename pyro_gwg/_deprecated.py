"""Old import paths and names that moved, kept working with a :class:`DeprecationWarning`
that names the new one.

Moved modules resolve through :class:`MovedModuleFinder`, an import hook that makes the
old dotted path an alias of the new module (no file stays at the old path, so version
control follows the move); moved attributes of a module resolve through its module-level
``__getattr__`` (:func:`moved_attribute`); renamed methods through :func:`renamed_method`.
These aliases name their targets as strings and import them only when an old path is
used: they are not imports of :mod:`pyro_gwg.contrib` by the core.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Callable, Dict, Optional

__all__ = ["MOVED_MODULES", "MovedModuleFinder", "moved_attribute", "renamed_method"]

#: old module path -> new module path
MOVED_MODULES: Dict[str, str] = {
    "pyro_gwg.continuous": "pyro_gwg.contrib.continuous",
    "pyro_gwg.diffusion": "pyro_gwg.contrib.diffusion",
    "pyro_gwg.enum": "pyro_gwg.enumeration",
    "pyro_gwg.estimators": "pyro_gwg.contrib.estimators",
    "pyro_gwg.estimators.ais": "pyro_gwg.contrib.estimators.ais",
    "pyro_gwg.estimators.arm": "pyro_gwg.contrib.estimators.arm",
    "pyro_gwg.estimators.driver": "pyro_gwg.contrib.estimators.driver",
    "pyro_gwg.estimators.uha": "pyro_gwg.contrib.estimators.uha",
    "pyro_gwg.estimators.weights": "pyro_gwg.contrib.estimators.weights",
    "pyro_gwg.models.continuous": "pyro_gwg.contrib.models",
    "pyro_gwg.train": "pyro_gwg.contrib.train",
}


def _warn_moved(old: str, new: str, stacklevel: int) -> None:
    """Warn that ``old`` moved to ``new``, attributing the warning to the frame
    ``stacklevel`` levels above the caller of this function."""
    warnings.warn(
        "{} has moved to {}; the old path is deprecated and will be removed.".format(old, new),
        DeprecationWarning,
        stacklevel=stacklevel + 2,
    )


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import hook: importing an old path of :data:`MOVED_MODULES` warns and returns the
    module at its new path (the same module object)."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = MOVED_MODULES[spec.name]
        # the warning skips the import system's frames: one level up is the import
        _warn_moved(spec.name, new, stacklevel=1)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        """Nothing to run: the new module was executed when it was imported."""


def install_finder() -> None:
    """Put :class:`MovedModuleFinder` first on :data:`sys.meta_path` (once), ahead of the
    path finder, which would take a stale folder left at an old path for a namespace
    package."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())


def moved_attribute(module: str, name: str, moved: Optional[Dict[str, str]] = None):
    """Resolve ``module.name`` for the module-level ``__getattr__`` of ``module``: a
    moved submodule (:data:`MOVED_MODULES`) or a name that ``moved`` maps to its new
    module; warn (once: the object is then kept on the old module) and return the
    object at its new place.

    :param str module: the old module's name (its ``__name__``).
    :param str name: the attribute looked up.
    :param dict moved: attribute name -> path of the module that now holds it.
    :raises AttributeError: for other names, as a module does.
    """
    old = "{}.{}".format(module, name)
    if old in MOVED_MODULES:
        _warn_moved(old, MOVED_MODULES[old], stacklevel=2)
        value = importlib.import_module(MOVED_MODULES[old])
    elif moved is not None and name in moved:
        _warn_moved(old, "{}.{}".format(moved[name], name), stacklevel=2)
        value = getattr(importlib.import_module(moved[name]), name)
    else:
        raise AttributeError("module {!r} has no attribute {!r}".format(module, name))
    # kept on the old module, so that one ``from module import name`` warns once (the
    # import system looks the name up twice)
    setattr(sys.modules[module], name, value)
    return value


def renamed_method(cls: str, old: str, new: str) -> Callable:
    """A deprecated alias ``cls.old`` of the method ``cls.new``.

    :param str cls: the class name, for the message.
    :param str old: the old method name.
    :param str new: the new method name.
    """

    def method(self, *args, **kwargs):
        warnings.warn(
            "{0}.{1} is deprecated; use {0}.{2}.".format(cls, old, new),
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self, new)(*args, **kwargs)

    method.__name__ = method.__qualname__ = old
    method.__doc__ = "Deprecated alias of :meth:`{}`.".format(new)
    return method

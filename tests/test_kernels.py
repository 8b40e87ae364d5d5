"""The kernel registry (:data:`pyro_gwg.kernels.REGISTRY`): every kernel class of
:mod:`pyro_gwg.kernels` is in it once, under its name, and :mod:`pyro_gwg` exports it,
so that the tests, the benchmarks and the documentation that iterate over it see a new
kernel without further edits."""

import importlib
import inspect
import pkgutil

import pytest

import pyro_gwg
import pyro_gwg.kernels
from pyro_gwg.kernels import REGISTRY, DiscreteKernel


def kernel_classes_of_the_kernel_modules() -> set:
    """The public classes that the modules of :mod:`pyro_gwg.kernels` define and that a
    user can build: concrete ``DiscreteKernel`` subclasses other than the bases of the
    registry's kernels."""
    found = set()
    for info in pkgutil.iter_modules(pyro_gwg.kernels.__path__):
        module = importlib.import_module("pyro_gwg.kernels." + info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
                and issubclass(obj, DiscreteKernel)
                and not inspect.isabstract(obj)
            ):
                found.add(obj)
    bases = {base for kernel in REGISTRY.values() for base in kernel.__mro__[1:]}
    return found - bases


def test_every_kernel_of_the_kernel_modules_is_in_the_registry_once_under_its_name():
    assert kernel_classes_of_the_kernel_modules() == set(REGISTRY.values())
    assert all(kernel.__name__ == name for name, kernel in REGISTRY.items())


def test_pyro_gwg_exports_every_kernel_of_the_registry():
    for name, kernel in REGISTRY.items():
        assert name in pyro_gwg.__all__ and getattr(pyro_gwg, name) is kernel, name


def test_dmala_is_an_alias_of_ncg_and_not_a_registry_entry():
    assert pyro_gwg.DMALA is pyro_gwg.NCG and "DMALA" not in REGISTRY
    assert "DMALA" in pyro_gwg.__all__


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_kernel_refuses_an_argument_it_does_not_take(name):
    with pytest.raises(TypeError, match="no_such_option"):
        REGISTRY[name](no_such_option=1)

"""Old import paths and names keep working, with a DeprecationWarning naming the new one."""

import importlib
import re
import sys

import pyro.distributions as dist
import pytest
import torch

import pyro_gwg
from pyro_gwg._deprecated import MOVED_MODULES
from pyro_gwg.sites import classify_site

# importing pyro_gwg.estimators.X also warns about its parent, pyro_gwg.estimators
pytestmark = pytest.mark.filterwarnings("ignore:pyro_gwg.estimators has moved:DeprecationWarning")


def forget(old):
    """Drop what an earlier use of the old dotted path ``old`` left behind (aliases in
    ``sys.modules``, the attribute on the parent), so that using it warns again."""
    parent, _, child = old.rpartition(".")
    if parent in MOVED_MODULES:  # the parent is an alias of a new module: forget it
        return forget(parent)
    for name in [m for m in sys.modules if m == old or m.startswith(old + ".")]:
        del sys.modules[name]
    vars(sys.modules[parent]).pop(child, None)


@pytest.mark.parametrize("old, new", sorted(MOVED_MODULES.items()))
def test_moved_module_imports_with_a_warning(old, new):
    forget(old)
    with pytest.warns(DeprecationWarning, match=re.escape("{} has moved to {}".format(old, new))):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize(
    "statement, old, new",
    [
        ("from pyro_gwg.enum import exact_posterior", "pyro_gwg.enum", "pyro_gwg.enumeration"),
        ("from pyro_gwg import estimators", "pyro_gwg.estimators", "pyro_gwg.contrib.estimators"),
        ("from pyro_gwg import train", "pyro_gwg.train", "pyro_gwg.contrib.train"),
        ("from pyro_gwg import diffusion", "pyro_gwg.diffusion", "pyro_gwg.contrib.diffusion"),
        ("from pyro_gwg import enum", "pyro_gwg.enum", "pyro_gwg.enumeration"),
        (
            "from pyro_gwg.models import continuous",
            "pyro_gwg.models.continuous",
            "pyro_gwg.contrib.models",
        ),
        (
            "from pyro_gwg.estimators.ais import ais",
            "pyro_gwg.estimators.ais",
            "pyro_gwg.contrib.estimators.ais",
        ),
    ],
)
def test_moved_module_from_import_warns(statement, old, new):
    forget(old)
    with pytest.warns(DeprecationWarning, match=re.escape(new)):
        exec(statement, {})


def test_moved_module_as_attribute_of_the_package():
    forget("pyro_gwg.train")
    with pytest.warns(DeprecationWarning, match="pyro_gwg.contrib.train"):
        train = pyro_gwg.train
    assert train is importlib.import_module("pyro_gwg.contrib.train")


@pytest.mark.parametrize(
    "old_module, name, new_module",
    [
        ("pyro_gwg.models", "RBMBlockGibbs", "pyro_gwg.contrib.kernels"),
        ("pyro_gwg.models.rbm", "RBMBlockGibbs", "pyro_gwg.contrib.kernels"),
        ("pyro_gwg.models.rbm", "RBMBlockGibbsState", "pyro_gwg.contrib.kernels"),
        ("pyro_gwg.models", "himmelblau", "pyro_gwg.contrib.models"),
        ("pyro_gwg.models", "GaussianMixture", "pyro_gwg.contrib.models"),
        ("pyro_gwg.models", "linear_regression", "pyro_gwg.contrib.models"),
    ],
)
def test_moved_name_warns_once_and_is_the_new_object(recwarn, old_module, name, new_module):
    forget("{}.{}".format(old_module, name))
    exec("from {} import {}".format(old_module, name), {})
    messages = [str(w.message) for w in recwarn if w.category is DeprecationWarning]
    assert messages == [
        "{0}.{1} has moved to {2}.{1}; the old path is deprecated and will be removed.".format(
            old_module, name, new_module
        )
    ]
    new = getattr(importlib.import_module(new_module), name)
    assert getattr(importlib.import_module(old_module), name) is new


def test_unknown_names_still_raise_attribute_error():
    for module in (pyro_gwg, pyro_gwg.models, pyro_gwg.models.rbm):
        with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
            module.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        importlib.import_module("pyro_gwg.no_such_module")


def test_discrete_site_encode_decode_are_deprecated_aliases():
    site = classify_site("x", dist.Bernoulli(0.5).expand([2]), torch.zeros(2))
    codes = torch.tensor([[0, 1]])
    with pytest.warns(DeprecationWarning, match="use DiscreteSite.values_from_codes"):
        values = site.encode(codes)
    assert torch.equal(values, site.values_from_codes(codes))
    with pytest.warns(DeprecationWarning, match="use DiscreteSite.codes_from_values"):
        assert torch.equal(site.decode(values, "Initial value"), codes)

"""Import layering of the package, checked on the source (CI runs it with the suite).

* ``pyro_gwg.contrib`` may import the core; the core (every other module of
  ``pyro_gwg``) never imports ``pyro_gwg.contrib``, at any level of a module.
* The core imports no optional or heavy dependency at module level (only inside
  functions), so that ``import pyro_gwg`` stays light: ArviZ (with xarray) is a
  requirement, for ``to_inference_data`` and the ESS of ``pyro_gwg.diagnostics``, but
  importing it doubles the time of ``import pyro_gwg``.
* The model bridge (``pyro_gwg.bridge``) imports only the layers below it: Pyro-trace
  plumbing, sites, the coordinate layout and the compilers, never a density, kernel,
  driver or runner.
* The modules of ``pyro_gwg.contrib.train`` import only those before them in
  :data:`TRAIN` (the launcher on the learner, the learner on the objectives), never the
  package itself.
"""

import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "pyro_gwg"
CONTRIB = "pyro_gwg.contrib"
#: top-level packages that the core may only import inside functions (optional, or heavy)
OPTIONAL = ("arviz", "jax", "matplotlib", "numpyro", "pandas", "pymc", "scipy", "sklearn", "xarray")
BRIDGE = "pyro_gwg.bridge"
#: the modules of pyro_gwg that the bridge may import (with their submodules)
BELOW_BRIDGE = (
    "pyro_gwg._taint",
    "pyro_gwg._trace",
    "pyro_gwg._validation",
    "pyro_gwg._warn",
    "pyro_gwg.bridge",
    "pyro_gwg.compile.backends",
    "pyro_gwg.compile.modes",
    "pyro_gwg.proposals.layout",
    "pyro_gwg.sites",
)


#: the runner from the bottom up: each module imports only those before it (the facade
#: pyro_gwg.mcmc sits on its strategies and draws; fit_many on the facade)
RUNNER = (
    "pyro_gwg.runner.checks",
    "pyro_gwg.runner.progress",
    "pyro_gwg.runner.draws",
    "pyro_gwg.runner.strategies",
    "pyro_gwg.mcmc",
    "pyro_gwg.runner.many",
)
#: the layers below the runner, which never import it
BELOW_RUNNER = (
    "pyro_gwg.auto",
    "pyro_gwg.bridge",
    "pyro_gwg.density",
    "pyro_gwg.driver",
    "pyro_gwg.kernels",
    "pyro_gwg.proposals",
)


#: pyro_gwg.contrib.train from the bottom up: each module imports only those before it
TRAIN = (
    "pyro_gwg.contrib.train.objectives",
    "pyro_gwg.contrib.train.models",
    "pyro_gwg.contrib.train.rbm",
    "pyro_gwg.contrib.train.pcd",
    "pyro_gwg.contrib.train.distributed",
)


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(node: ast.AST, module: str, is_package: bool):
    """Dotted names an ``import`` / ``from ... import`` node imports (relative ones
    resolved against ``module``); for ``from a import b`` both ``a`` and ``a.b``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + ["{}.{}".format(base, alias.name) for alias in node.names]


def module_level_nodes(tree: ast.AST):
    """The nodes of a module outside function bodies (class bodies run at import)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                stack.append(child)


def violations(source: str, module: str, is_package: bool = False):
    """Layering violations of one module's source, as readable strings."""
    tree = ast.parse(source)
    if module == CONTRIB or module.startswith(CONTRIB + "."):
        return []
    found = []
    top_level = {id(n) for n in module_level_nodes(tree)}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for name in imported_names(node, module, is_package):
            if name == CONTRIB or name.startswith(CONTRIB + "."):
                found.append(
                    "{}:{} imports {} (core must not import contrib)".format(
                        module, node.lineno, name
                    )
                )
            elif name.split(".")[0] in OPTIONAL and id(node) in top_level:
                found.append(
                    "{}:{} imports {} at module level (optional dependency)".format(
                        module, node.lineno, name
                    )
                )
    return found


def bridge_violations(source: str, module: str, is_package: bool = False):
    """Imports of a module of ``pyro_gwg`` above the bridge by a module of the bridge
    (at any level of the module), as readable strings."""
    if not (module == BRIDGE or module.startswith(BRIDGE + ".")):
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for name in imported_names(node, module, is_package):
            if name.split(".")[0] != "pyro_gwg" or name == "pyro_gwg":
                continue
            if not any(name == b or name.startswith(b + ".") for b in BELOW_BRIDGE):
                found.append(
                    "{}:{} imports {} (above the bridge)".format(module, node.lineno, name)
                )
    return found


def test_the_bridge_imports_only_the_layers_below_it():
    found = []
    for path in sorted((PACKAGE / "bridge").rglob("*.py")):
        found += bridge_violations(path.read_text(), module_name(path), path.name == "__init__.py")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "module, source, expected",
    [
        ("pyro_gwg.bridge.checks", "from pyro_gwg.kernels.base import DiscreteKernel", True),
        ("pyro_gwg.bridge.nan", "def f():\n    from pyro_gwg import density", True),
        ("pyro_gwg.bridge.batching", "from ..driver import ChainDriver", True),
        ("pyro_gwg.bridge.density", "from pyro_gwg import _trace\nfrom .nan import x", False),
        ("pyro_gwg.kernels.base", "from pyro_gwg.driver import ChainDriver", False),
    ],
)
def test_the_bridge_check_finds_imports_from_above(module, source, expected):
    assert bool(bridge_violations(source, module)) == expected


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def runner_violations(source: str, module: str, is_package: bool = False):
    """Imports of a runner module by a module below it in :data:`RUNNER`, or by a
    layer below the runner (at any level of the module), as readable strings."""
    if module in RUNNER:
        above = RUNNER[RUNNER.index(module) :]
    elif _within(module, BELOW_RUNNER):
        above = RUNNER + ("pyro_gwg.runner",)
    else:
        return []
    return imports_above(source, module, is_package, above)


def imports_above(source: str, module: str, is_package: bool, above, exact=()) -> list:
    """The imports of ``module`` (at any level) of the modules ``above`` it (with their
    submodules) and of the modules ``exact`` (without), other than itself, as readable
    strings."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for name in imported_names(node, module, is_package):
            if (_within(name, above) or name in exact) and name != module:
                found.append("{}:{} imports {} (above it)".format(module, node.lineno, name))
    return found


def test_the_runner_is_layered():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += runner_violations(path.read_text(), module_name(path), path.name == "__init__.py")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "module, source, expected",
    [
        ("pyro_gwg.runner.draws", "from pyro_gwg.runner.strategies import LocalBlocks", True),
        ("pyro_gwg.runner.strategies", "def f():\n    from pyro_gwg.mcmc import MCMC", True),
        ("pyro_gwg.kernels.base", "from pyro_gwg.runner.draws import Draws", True),
        ("pyro_gwg.driver", "import pyro_gwg.mcmc", True),
        ("pyro_gwg.mcmc", "from pyro_gwg.runner.strategies import LocalBlocks", False),
        ("pyro_gwg.runner.many", "from pyro_gwg.mcmc import MCMC", False),
        ("pyro_gwg.inference_data", "from pyro_gwg.runner.draws import Draws", False),
    ],
)
def test_the_runner_check_finds_imports_from_above(module, source, expected):
    assert bool(runner_violations(source, module)) == expected


def train_violations(source: str, module: str):
    """Imports, by a module of :data:`TRAIN`, of a module after it or of the package
    ``pyro_gwg.contrib.train`` (which imports them all), as readable strings."""
    if module not in TRAIN:
        return []
    above = TRAIN[TRAIN.index(module) :]
    return imports_above(source, module, False, above, exact=("pyro_gwg.contrib.train",))


def test_contrib_train_is_layered():
    modules = {module_name(path) for path in (PACKAGE / "contrib" / "train").glob("*.py")}
    assert modules == set(TRAIN) | {"pyro_gwg.contrib.train"}, "list a new module in TRAIN"
    found = []
    for path in sorted((PACKAGE / "contrib" / "train").glob("*.py")):
        found += train_violations(path.read_text(), module_name(path))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "module, source, expected",
    [
        ("pyro_gwg.contrib.train.objectives", "from pyro_gwg.contrib.train.pcd import PCD", True),
        ("pyro_gwg.contrib.train.pcd", "def f():\n    from . import distributed", True),
        ("pyro_gwg.contrib.train.pcd", "from pyro_gwg.contrib.train import l1_penalty", True),
        ("pyro_gwg.contrib.train.distributed", "from pyro_gwg.contrib.train.pcd import PCD", False),
        ("pyro_gwg.contrib.train.pcd", "from .objectives import l1_penalty", False),
    ],
)
def test_the_train_check_finds_imports_from_above(module, source, expected):
    assert bool(train_violations(source, module)) == expected


def test_core_never_imports_contrib_nor_optional_dependencies_at_module_level():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += violations(path.read_text(), module_name(path), path.name == "__init__.py")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "module, source",
    [
        ("pyro_gwg.mcmc", "from pyro_gwg.contrib.estimators import ais"),
        ("pyro_gwg.mcmc", "import pyro_gwg.contrib.train"),
        ("pyro_gwg.models", "from pyro_gwg import contrib"),
        ("pyro_gwg.models.rbm", "def f():\n    from ..contrib.kernels import RBMBlockGibbs"),
        ("pyro_gwg.models.rbm", "from pyro_gwg.contrib.train.rbm import train_rbm"),
        ("pyro_gwg.runner.many", "def f():\n    from pyro_gwg.contrib.sbc import sbc"),
        ("pyro_gwg.diagnostics", "import arviz"),
        ("pyro_gwg.kernels.base", "class A:\n    from sklearn.datasets import load_iris"),
    ],
)
def test_the_check_finds_forbidden_imports(module, source):
    assert violations(source, module, is_package=module == "pyro_gwg.models")


@pytest.mark.parametrize(
    "module, source",
    [
        ("pyro_gwg.contrib.train", "from pyro_gwg.models import ising\nimport arviz"),
        ("pyro_gwg.diagnostics", "def f():\n    import arviz"),
        ("pyro_gwg.models.rbm", "from ..proposals.blocks import cost"),
    ],
)
def test_the_check_allows_what_the_rule_allows(module, source):
    assert violations(source, module) == []


def test_import_pyro_gwg_loads_neither_contrib_nor_optional_dependencies():
    code = textwrap.dedent(
        """
        import sys
        import pyro_gwg
        loaded = sorted(m for m in sys.modules
                        if m.split(".")[0] in {} or m.startswith("pyro_gwg.contrib"))
        assert not loaded, loaded
        """
    ).format(OPTIONAL)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert result.returncode == 0, result.stderr

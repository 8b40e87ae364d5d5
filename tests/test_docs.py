"""The docs say what the code does: each kernel's documented per-draw statistics are
the fields of the info record its step returns plus what the base class adds, and the
generated benchmark tables are up to date with their JSON files."""

import ast
import configparser
import importlib.util
import inspect
import re
import sys
from pathlib import Path

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_gwg
from pyro_gwg.kernels.base import DiscreteKernel

ROOT = Path(__file__).resolve().parent.parent

#: Added by :meth:`DiscreteKernel.diagnostics` to the per-draw statistics.
BASE_EXTRAS = {"acceptance rate", "divergences"}


def model():
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(0.5))
    pyro.sample("y", dist.Normal(x.sum(-1), 1.0), obs=torch.tensor(2.0))


def kernel_classes():
    """Every concrete kernel class exported by :mod:`pyro_gwg`."""
    return sorted(
        {
            obj
            for obj in vars(pyro_gwg).values()
            if inspect.isclass(obj)
            and issubclass(obj, DiscreteKernel)
            and obj is not DiscreteKernel
        },
        key=lambda cls: cls.__name__,
    )


def documented_statistics(doc: str) -> set:
    """The ````names```` of the paragraph of ``doc`` that starts with "Per-draw
    statistics"."""
    match = re.search(r"Per-draw statistics(.*?)(\n\s*\n|$)", doc, re.S)
    assert match, "no 'Per-draw statistics' paragraph"
    return set(re.findall(r"``([^`]+)``", match.group(1)))


def test_every_kernel_is_checked():
    names = {cls.__name__ for cls in kernel_classes()}
    assert {"GWG", "NCG", "AVG", "PAVG", "Gibbs", "HammingBall", "LocallyBalanced"} <= names


@pytest.mark.parametrize("cls", kernel_classes(), ids=lambda cls: cls.__name__)
def test_documented_statistics_match_the_info_record(cls):
    pyro.set_rng_seed(0)
    kernel = cls(model, jit_compile=False)
    # the MCMCKernel protocol as pyro.infer.MCMC drives it, up to (not including) cleanup
    kernel.setup(warmup_steps=1)
    params = kernel.initial_params
    for _ in range(3):
        params = kernel.sample(params)
    recorded = set(kernel.diagnostics())
    info_fields = set(kernel.build(kernel.energy).step(kernel.state)[1]._fields)
    assert recorded == info_fields | {"log_joint"} | BASE_EXTRAS
    assert documented_statistics(cls.__doc__) == info_fields | {"log_joint"}


def test_base_class_documents_its_extras():
    doc = documented_statistics(DiscreteKernel.__doc__)
    assert BASE_EXTRAS <= doc


def test_results_md_is_up_to_date():
    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    assert report.main(["--check"]) == 0, "run python benchmarks/report.py"


#: methods of DiscreteKernel that the chain driver replaced; no page may describe them
REMOVED = ("_init_state", "_step(", "_adapt(", "_compile_key", "transition()", ".adapts")


@pytest.mark.parametrize(
    "page", sorted((ROOT / "docs").glob("*.rst")) + [ROOT / "README.md"], ids=lambda p: p.name
)
def test_pages_name_no_removed_kernel_method(page):
    text = page.read_text()
    assert [name for name in REMOVED if name in text] == []
    assert not hasattr(DiscreteKernel, "transition")


TUTORIALS = sorted((ROOT / "examples" / "tutorials").glob("*.py"))


def test_the_gallery_has_six_tutorials_that_sphinx_gallery_executes():
    conf = (ROOT / "docs" / "conf.py").read_text()
    pattern = re.search(r'"filename_pattern": r"(.*?)"', conf).group(1)
    executed = [p for p in TUTORIALS if re.search(pattern, "/" + p.name)]
    assert executed == TUTORIALS and len(TUTORIALS) >= 6, [p.name for p in TUTORIALS]


@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.name)
def test_each_tutorial_has_a_title_and_a_fast_mode(script):
    text = script.read_text()
    # sphinx-gallery takes the title from the docstring's first underlined line
    assert re.match(r'r?"""\n(.+)\n=+\n', text), "no title in the module docstring"
    assert 'FAST = os.environ.get("PYRO_GWG_FAST") == "1"' in text


#: modules that ``pip install -e .`` brings, which a tutorial may import without naming
#: them: the package's own requirements (``install_requires`` of setup.cfg, read below)
#: and the array libraries under them (pyro-ppl requires numpy, arviz numpy, scipy and
#: xarray)
ARRAY_LIBRARIES = {"numpy", "scipy", "xarray"}
#: distributions whose module has another name
MODULE_OF = {"pyro-ppl": "pyro", "scikit-learn": "sklearn", "scikit-image": "skimage"}


def setup_cfg_requirements(option: str, section: str = "options") -> set:
    """The distribution names listed by ``option`` of ``section`` of setup.cfg."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = parser[section][option].split()
    return {re.match(r"[A-Za-z0-9_.-]+", line).group(0).lower() for line in lines if line}


def third_party_imports(script: Path) -> set:
    """The top-level modules ``script`` imports, other than the standard library's."""
    modules = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names)


@pytest.mark.skipif(sys.version_info < (3, 10), reason="needs sys.stdlib_module_names")
@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.name)
def test_each_tutorial_names_its_extra_dependencies(script):
    # run as a script, a tutorial that imports what `pip install -e .` did not install
    # must say so at its top, with the command that installs it
    core = {MODULE_OF.get(name, name) for name in setup_cfg_requirements("install_requires")}
    extra = third_party_imports(script) - core - ARRAY_LIBRARIES - {"pyro_gwg"}
    docstring = ast.get_docstring(ast.parse(script.read_text()))
    match = re.search(r"Requires: ([^(]*)\(", docstring)
    assert match, "no 'Requires: ...' line in the module docstring"
    named = {name.strip() for name in match.group(1).split(",")}
    assert {MODULE_OF.get(name, name) for name in named} >= extra
    assert 'pip install -e ".[docs]"' in " ".join(docstring.split())
    docs_extra = setup_cfg_requirements("docs", section="options.extras_require")
    assert named <= docs_extra, "the docs extra does not install them"


#: the end of every tutorial: run as a script, it saves its figures (sphinx-gallery, which
#: runs it for the documentation, shows them on the page and hides these lines)
SAVE_FIGURES = """
# sphinx_gallery_start_ignore
if "sphinx_gallery" not in sys.modules:  # run as a script: save the figures
    stem = os.path.splitext(os.path.basename(__file__))[0]
    for number in plt.get_fignums():
        plt.figure(number).savefig("{}_{}.png".format(stem, number))
# sphinx_gallery_end_ignore
"""


@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.name)
def test_each_tutorial_saves_its_figures_when_run_as_a_script(script):
    text = script.read_text()
    assert text.endswith(SAVE_FIGURES)
    assert "plt.show()" not in text  # a script must not stop at a window
    assert "``{}_<n>.png``".format(script.stem) in text  # the docstring says where

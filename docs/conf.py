"""Sphinx configuration of the pyro-gwg documentation.

Build with ``sphinx-build -W -b html docs docs/_build/html`` from the repository root.
"""

import importlib
import os
import sys

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles

# Import the package from the checkout, without installing it.
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import pyro_gwg  # noqa: E402

project = "pyro-gwg"
author = "The pyro-gwg developers"
copyright = author
version = pyro_gwg.__version__
release = pyro_gwg.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
]

# The tutorials are plain Python scripts in examples/tutorials, executed at every build by
# sphinx-gallery (scripts rather than notebooks: they diff, lint and run like any other
# file, and need no Jupyter kernel). PYRO_GWG_FAST=1 in the environment makes each one
# run the same code on a smaller problem, as CI does; PYRO_GWG_DOCS_JOBS runs that many
# tutorials at once.
_JOBS = int(os.environ.get("PYRO_GWG_DOCS_JOBS", "1"))
if _JOBS > 1:
    # tutorials run side by side: one PyTorch thread each (the workers inherit this),
    # or their threads contend for the cores and each small operator waits on them
    os.environ.setdefault("OMP_NUM_THREADS", "1")
sphinx_gallery_conf = {
    "examples_dirs": ["../examples/tutorials"],
    "gallery_dirs": ["tutorials"],
    "filename_pattern": r"/\d\d_",  # every numbered script is executed
    "within_subsection_order": "FileNameSortKey",
    "abort_on_example_error": True,
    "run_stale_examples": True,  # every build executes every tutorial, never a stale copy
    "download_all_examples": False,
    "remove_config_comments": True,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "parallel": _JOBS,
    "write_computation_times": True,
    "min_reported_time": 0,
}

# Docstrings are written in Pyro's reST style (":param type name:"), so no napoleon.
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # argument types are given in the :param: fields
autoclass_content = "class"

templates_path = []
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "tutorials/*.ipynb"]
source_suffix = {".rst": "restructuredtext"}
root_doc = "index"

# Pyro, torch and the standard library are not built here, and intersphinx is off (the
# build must not need the network): references to them stay plain text.
nitpicky = False


def _resolve_reexport(app, env, node, contnode):
    """Resolve references to re-exported names (``pyro_gwg.GWG``,
    ``pyro_gwg.models.fhmm_time_blocks``, ...), which docstrings use, to the module
    that defines and documents them (``pyro_gwg.kernels.gwg.GWG``)."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("pyro_gwg."):
        return None
    module_name, _, name = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return None
    home = getattr(obj, "__module__", None)
    if not home or home == module_name:
        return None
    return env.get_domain("py").resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], home + "." + name, node, contnode
    )


def _kernel_modules():
    """``{module name: [public names of its kernels]}`` in the order of
    :data:`pyro_gwg.kernels.REGISTRY`: the names that :mod:`pyro_gwg` exports from
    each kernel module (``DMALA``, NCG's other name, with DULA)."""
    from pyro_gwg.kernels import REGISTRY

    kernels = list(REGISTRY.values())
    modules = {}
    for kernel in kernels:
        modules.setdefault(kernel.__module__, [])
    for module_name, names in modules.items():
        module = importlib.import_module(module_name)
        exported = [
            name
            for name in module.__all__
            if name in pyro_gwg.__all__ and getattr(module, name) in kernels
        ]
        names.extend(sorted(exported, key=lambda name: kernels.index(getattr(module, name))))
    return modules


class KernelRegistry(Directive):
    """``.. kernel-registry:: table`` (a table of the kernels of
    :data:`pyro_gwg.kernels.REGISTRY`) or ``.. kernel-registry:: modules`` (a section
    with the ``automodule`` of each kernel module): generated, so that a new kernel
    needs no edit of the API page."""

    required_arguments = 1

    def run(self):
        modules = _kernel_modules()
        if self.arguments[0] == "table":
            lines = [".. list-table::", "   :header-rows: 1", "   :widths: 20 30 50", ""]
            lines += ["   * - Name", "     - Documented as", "     - Summary"]
            for module_name, names in modules.items():
                module = importlib.import_module(module_name)
                for name in names:
                    kernel = getattr(module, name)
                    home = "{}.{}".format(kernel.__module__, kernel.__name__)
                    summary = " ".join(kernel.__doc__.split("\n\n")[0].split())
                    if name != kernel.__name__:
                        summary = "another name of ``{}``".format(kernel.__name__)
                    lines += [
                        "   * - ``pyro_gwg.{}``".format(name),
                        "     - :class:`{}`".format(home),
                        "     - {}".format(summary),
                    ]
        else:
            lines = []
            for module_name, names in modules.items():
                title = " and ".join(
                    [", ".join(names[:-1]), names[-1]] if len(names) > 1 else names
                )
                lines += [title, "~" * len(title), "", ".. automodule:: " + module_name]
                lines += ["   :members:", ""]
        node = nodes.section() if self.arguments[0] == "modules" else nodes.container()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source="REGISTRY"), node)
        return node.children


def setup(app):
    app.connect("missing-reference", _resolve_reexport)
    app.add_directive("kernel-registry", KernelRegistry)


html_theme = "alabaster"
html_theme_options = {
    "description": "Gibbs-With-Gradients for the discrete latent sites of Pyro models",
    "fixed_sidebar": True,
}
html_static_path = []

"""The check that the default mode captures a kernel's transition on a model (shared by
the must-accept corpus and the library's models)."""

from __future__ import annotations

import logging
import warnings

import pyro_gwg


def assert_default_capture(sampler, caplog, *args) -> None:
    """Three draws of ``sampler`` (a kernel in the default ``jit_compile="auto"``) on
    the model with ``args``, through Pyro's ``MCMCKernel`` protocol, the library's
    compile messages recorded by pytest's ``caplog``: the transition is captured at its
    second step and runs as the graph (checked there against the eager step). A
    capture that fails or departs from the model runs the chains eagerly, exact but
    several times slower; only the capture's known limit (an operator that reads a
    value: logged, not warned) may leave a model eager."""
    with caplog.at_level(logging.DEBUG, logger="pyro_gwg.compile"), warnings.catch_warnings():
        warnings.simplefilter("error", pyro_gwg.CompilationWarning)
        sampler.setup(0, *args)
        params = sampler.initial_params
        for _ in range(3):
            params = sampler.sample(params)
    (transition,) = sampler.driver._compiled.values()
    form = transition.fn.form
    messages = [record.getMessage() for record in caplog.records]
    assert form == "graph" or any("data-dependent" in m for m in messages), (form, messages)
    sampler.cleanup()

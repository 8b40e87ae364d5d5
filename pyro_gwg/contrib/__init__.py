"""Tools built on the pyro-gwg core, loaded only when imported: normalising-constant
estimators (:mod:`pyro_gwg.contrib.estimators`: AIS, ARM and its stage builders, UHA),
persistent contrastive divergence (:mod:`pyro_gwg.contrib.train`), Monte Carlo score
diffusion (:mod:`pyro_gwg.contrib.diffusion`), continuous targets
(:mod:`pyro_gwg.contrib.continuous`, :mod:`pyro_gwg.contrib.models`), model-specific
kernels (:mod:`pyro_gwg.contrib.kernels`) and simulation-based calibration of a kernel on
a model (:mod:`pyro_gwg.contrib.sbc`).

Contrib imports the core; the core never imports contrib (``tests/test_layering.py``
checks it). The sections from here to the end of this page document contrib.
"""

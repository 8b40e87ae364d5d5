"""The bridge from a Pyro model to a density over its latent discrete sites, by job.

* :mod:`pyro_gwg.bridge.density`: :class:`~pyro_gwg.bridge.density.ModelDensity`,
  the log joint of the latent codes from a trace of the model, and its gradient;
* :mod:`pyro_gwg.bridge.batching`: how several states are evaluated (one plated run,
  :func:`torch.func.vmap`, or one run per state);
* :mod:`pyro_gwg.bridge.checks`: what a model must satisfy (fixed sites and supports,
  no randomness outside ``pyro.sample``), checked at set-up and at every evaluation;
* :mod:`pyro_gwg.bridge.initial`: the search for initial states;
* :mod:`pyro_gwg.bridge.nan`: NaN or ``+inf`` log densities, recorded and reported;
* :mod:`pyro_gwg.bridge.compiled`: the energy traced by a compiler, and the tensors a
  compiled function takes as arguments;
* :mod:`pyro_gwg.bridge.errors`: the wording of the bridge's errors.
"""

"""The runner behind :class:`pyro_gwg.MCMC` (:mod:`pyro_gwg.mcmc`, the facade), by job.

* :mod:`pyro_gwg.runner.checks`: the checks of the runner's arguments;
* :mod:`pyro_gwg.runner.strategies`: one strategy per chain method (batched blocks in
  this process, Ray blocks, :class:`pyro.infer.MCMC`) around the one chain loop;
* :mod:`pyro_gwg.runner.draws`: :class:`~pyro_gwg.runner.draws.Draws`, the draws of a
  run (integer codes, statistics, decoding, diagnostics and the summary table);
* :mod:`pyro_gwg.runner.progress`: the progress bar;
* :mod:`pyro_gwg.runner.many`: :func:`~pyro_gwg.runner.many.fit_many`, one run per
  data set.
"""

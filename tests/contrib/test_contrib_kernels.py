"""Model-specific kernels of pyro_gwg.contrib.kernels."""

import pyro
import torch
from exactness import assert_exact
from pyro.infer import MCMC

from pyro_gwg import ModelDensity, exact_posterior
from pyro_gwg.contrib.kernels import RBMBlockGibbs
from pyro_gwg.models import random_rbm, rbm


def test_block_gibbs_kernel_in_pyro_mcmc_is_exact():
    params = random_rbm(5, 4, weight_scale=1.0, seed=3)
    pyro.set_rng_seed(0)
    mcmc = MCMC(RBMBlockGibbs(), num_samples=2000, warmup_steps=20, disable_progbar=True)
    mcmc.run(*params)
    v = mcmc.get_samples(group_by_chain=True)["v"].long()
    assert_exact(v, exact_posterior(rbm, *params))
    diag = mcmc.diagnostics()
    assert diag["energy_evals"]["chain 0"].eq(1).all() and diag["grad_evals"]["chain 0"].eq(0).all()
    energy = ModelDensity(rbm, params)
    last = v[0, -1:]
    assert torch.allclose(energy.log_joint(last), diag["log_joint"]["chain 0"][-1:], atol=1e-5)

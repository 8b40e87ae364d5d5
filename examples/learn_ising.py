"""Learning the couplings of a lattice Ising model by persistent contrastive divergence.

Training data: 2000 states of a 6 x 6 periodic lattice Ising model (theta = 0.2, the
convention of Grathwohl et al. 2021, Eq. 10), drawn by independent Gibbs chains.
:class:`pyro_gwg.contrib.train.PCD` fits
:func:`pyro_gwg.contrib.train.learnable_ising` (couplings and
field as ``pyro.param``) with an L1 penalty, keeping 256 persistent chains that take
10 MCMC steps per update: once with Gibbs-With-Gradients, once with single-site Gibbs
(Grathwohl et al. 2021, Section 6). The printout follows the log RMSE of the learned couplings.

Run: ``python examples/learn_ising.py`` (about a minute)
"""

import math
import time

import pyro
import torch

from pyro_gwg import GWG, MCMC, Gibbs
from pyro_gwg.contrib.train import PCD, coupling_rmse, learnable_ising, symmetric_couplings
from pyro_gwg.models import ising, lattice_couplings


def log_rmse(true: torch.Tensor) -> float:
    """Log RMSE of the couplings in the parameter store against ``true``."""
    return math.log(float(coupling_rmse(symmetric_couplings(pyro.param("couplings")), true)))


def main(size: int = 6, theta: float = 0.2, iterations: int = 800, steps: int = 10) -> None:
    torch.set_num_threads(1)
    pyro.set_rng_seed(0)
    true = lattice_couplings(size, theta)
    num_spins = size * size
    mcmc = MCMC(
        Gibbs(ising, scan="systematic", jit_compile=True),
        num_samples=1,
        warmup_steps=200 * num_spins,  # 200 sweeps per chain
        num_chains=2000,
        disable_progbar=True,
    )
    mcmc.run(true)
    data = mcmc.get_samples()["x"].reshape(-1, num_spins)
    zero = math.log(float(true.pow(2).mean().sqrt()))
    print("{} training states; log RMSE of zero couplings {:.3f}".format(len(data), zero))
    for kernel in (GWG, Gibbs):
        pyro.clear_param_store()
        pcd = PCD(
            learnable_ising,
            kernel(),
            num_chains=256,
            mcmc_steps=steps,
            lr=0.003,
            penalty={"couplings": 0.01},
            model_args=(num_spins,),
        )
        start = time.perf_counter()

        def report(t, pcd, name=kernel.__name__):
            if (t + 1) % 200 == 0:
                print(
                    "  {:<5} iteration {:>4}: log RMSE {:.3f}".format(name, t + 1, log_rmse(true))
                )

        pcd.fit(data, num_iterations=iterations, batch_size=256, callback=report)
        learned = symmetric_couplings(pyro.param("couplings")).detach()
        bonds = true != 0
        print(
            "{}: mean learned bond {:.3f} (true {}), mean |non-bond| {:.3f}; {:.1f}s".format(
                kernel.__name__,
                float(learned[bonds].mean()),
                theta,
                float(learned[~bonds].abs().mean()),
                time.perf_counter() - start,
            )
        )


if __name__ == "__main__":
    main()

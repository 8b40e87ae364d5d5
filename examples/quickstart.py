"""Quickstart: denoise a binary image with Gibbs-With-Gradients inside pyro.infer.MCMC.

The model (``pyro_gwg.models.ising_denoising``) is an ordinary Pyro model: an Ising
prior on a 16x16 binary image and Gaussian noise on the observed pixels. GWG reads
the energy of the 256 latent bits straight from the model.

Run: ``python examples/quickstart.py``
"""

import pyro
from pyro.infer import MCMC

from pyro_gwg import GWG
from pyro_gwg.models import ising_denoising, noisy_image


def main(num_samples: int = 1000, warmup_steps: int = 300, num_chains: int = 2) -> dict:
    pyro.set_rng_seed(0)
    clean, noisy = noisy_image(size=16, noise_scale=0.8, seed=0)
    kernel = GWG(ising_denoising, jit_compile=True)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, num_chains=num_chains)
    mcmc.run(noisy, coupling=0.5, noise_scale=0.8)

    print("\nPosterior summary of the first row of pixels:")
    samples = mcmc.get_samples(group_by_chain=True)
    pyro.infer.mcmc.util.print_summary({"x[0, :]": samples["x"][:, :, 0, :]}, prob=0.9)

    diagnostics = mcmc.diagnostics()
    acceptance = diagnostics["acceptance rate"]
    ess = diagnostics["x"]["n_eff"]
    posterior_mean = samples["x"].mean((0, 1))
    restored = (posterior_mean > 0.5).float()
    naive = (noisy > 0).float()
    print("acceptance rate per chain:", {k: round(v, 3) for k, v in acceptance.items()})
    print(
        "effective sample size over the {} pixels: min {:.0f}, median {:.0f}".format(
            ess.numel(), float(ess.min()), float(ess.median())
        )
    )
    print(
        "pixel error: thresholded noisy image {:.1%}, posterior mean {:.1%}".format(
            float((naive != clean).float().mean()), float((restored != clean).float().mean())
        )
    )
    return {"acceptance": acceptance, "ess": ess, "restored": restored, "clean": clean}


if __name__ == "__main__":
    main()

"""Quickstart: denoise a binary image with Gibbs-With-Gradients inside pyro.infer.MCMC.

The model, :func:`pyro_gwg.models.ising_denoising`, is an ordinary Pyro model: an Ising
prior on a 16 x 16 binary image ``x`` and Gaussian noise on the observed pixels ``y``.
``GWG`` reads the energy of the 256 latent bits straight from the model's trace.

Run: ``python examples/quickstart.py``
"""

import arviz as az
import pyro
import torch
import xarray as xr
from pyro.infer import MCMC
from pyro.infer.mcmc.util import print_summary
from pyro.ops.stats import effective_sample_size

from pyro_gwg import GWG, to_inference_data
from pyro_gwg.models import ising_denoising, noisy_image


def main(num_samples: int = 4000, warmup_steps: int = 1000, num_chains: int = 2) -> dict:
    pyro.set_rng_seed(0)
    clean, noisy = noisy_image(size=16, noise_scale=0.8, seed=0)
    mcmc = MCMC(
        GWG(ising_denoising, num_flips="auto"),  # flips per step adapted in warmup
        num_samples=num_samples,
        warmup_steps=warmup_steps,
        num_chains=num_chains,
        mp_context="spawn",  # with enough cores, chains run in processes; see the docs
    )
    mcmc.run(noisy, coupling=0.5, noise_scale=0.8)

    x = mcmc.get_samples(group_by_chain=True)["x"]  # [chains, draws, 16, 16]
    flat = x.reshape(num_chains, num_samples, -1)
    # most pixels are certain; summarise the eight the posterior is least sure about
    uncertain = flat.var((0, 1)).argsort(descending=True)[:8]
    print("\nThe 8 most uncertain pixels (row, col):")
    print_summary(
        {"x[{},{}]".format(int(i) // 16, int(i) % 16): flat[..., i] for i in uncertain}, prob=0.9
    )

    diagnostics = mcmc.diagnostics()
    acceptance = diagnostics["acceptance rate"]
    log_joint = torch.stack([diagnostics["log_joint"][c] for c in sorted(diagnostics["log_joint"])])
    ess_log_joint = float(effective_sample_size(log_joint, chain_dim=0, sample_dim=1))
    ess_pixels = effective_sample_size(flat[..., uncertain], chain_dim=0, sample_dim=1)
    restored = (x.mean((0, 1)) > 0.5).float()
    naive = (noisy > 0).float()

    print("acceptance rate:", ", ".join("{} {:.3f}".format(k, v) for k, v in acceptance.items()))
    print(
        "effective sample size ({} draws): log joint {:.0f}; "
        "uncertain pixels {:.0f} to {:.0f}".format(
            num_chains * num_samples,
            ess_log_joint,
            float(ess_pixels.min()),
            float(ess_pixels.max()),
        )
    )
    print(
        "pixel error: thresholded noisy image {:.1%}, posterior mean {:.1%}".format(
            float((naive != clean).float().mean()), float((restored != clean).float().mean())
        )
    )

    # the run as ArviZ InferenceData (pixels as integers, per-draw acceptance rate, the
    # pointwise log-likelihood of every observed pixel), and its summary of those pixels
    idata = to_inference_data(mcmc)
    rows, cols = uncertain // 16, uncertain % 16
    x_uncertain = idata.posterior["x"].isel(
        rows=xr.DataArray(rows, dims="pixel"), cols=xr.DataArray(cols, dims="pixel")
    )
    labels = ["{},{}".format(int(r), int(c)) for r, c in zip(rows, cols)]
    print("\nArviZ summary of the same pixels (row,col):")
    print(az.summary(x_uncertain.assign_coords(pixel=labels).to_dataset()).to_string())
    return {
        "acceptance": acceptance,
        "ess_log_joint": ess_log_joint,
        "restored": restored,
        "clean": clean,
        "idata": idata,
    }


if __name__ == "__main__":
    main()

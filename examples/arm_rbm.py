"""The adaptive resample-move algorithm (ARM) on an RBM fitted to binarised digits.

The RBM of ``ais_rbm.py`` (64 visible, 16 hidden units, exact log Z by summing the
hidden states) is reached through 64 RBMs of growing size: the visible units enter one
at a time, most active first (:func:`pyro_gwg.contrib.estimators.rbm_stages`,
:func:`~pyro_gwg.contrib.estimators.activity_order`).
:func:`pyro_gwg.contrib.estimators.arm` moves the
particles with a kernel sweep at every stage, weights them by the next unit summed out
exactly, adds particles while the ESS ratio is below 0.7 and resamples (residual) when
the weights degenerate. ARM with GWG and single-site Gibbs sweeps, with the RBM's
block-Gibbs kernel (:class:`pyro_gwg.contrib.kernels.RBMBlockGibbs`, whose sweeps cost no model
run, so more particles fit), and ARM-reseed (new particles from training images
brought to each stage by 200 block-Gibbs sweeps) are compared with the exact value;
each estimate pools 8 independent runs, whose spread gives the standard error.

Run: ``python examples/arm_rbm.py`` (needs scikit-learn; about a minute)
"""

import time

import pyro
import torch
from ais_rbm import digits_rbm

from pyro_gwg import GWG, Gibbs
from pyro_gwg.contrib.estimators import activity_order, arm, rbm_stages
from pyro_gwg.contrib.kernels import RBMBlockGibbs


def main() -> None:
    torch.set_num_threads(1)
    pyro.set_rng_seed(0)
    params, train, _, exact = digits_rbm()
    order = activity_order(train)
    stages = rbm_stages(params, order)
    print("exact log Z = {:.4f}; {} stages".format(exact, len(stages)))
    reseed = train[:, order].long()  # training images in the stages' unit order
    variants = {  # name: (kernel, particles, options)
        "ARM, GWG sweeps": (GWG(), 200, {}),
        "ARM, Gibbs sweeps": (Gibbs(), 200, {}),
        "ARM, block Gibbs": (RBMBlockGibbs(), 2000, {"num_moves": 1}),
        "ARM-reseed, block": (RBMBlockGibbs(), 500, {"num_moves": 1, "reseed": reseed}),
    }
    for name, (kernel, particles, options) in variants.items():
        start = time.perf_counter()
        result = arm(stages, kernel, num_particles=particles, num_runs=8, **options)
        grown = sum(int((s.generate_iterations > 0).sum()) for s in result.stages)
        resampled = sum(int(s.resampled.sum()) for s in result.stages)
        print(
            "{:<18} R {:>4}: log Z {:.4f} +- {:.4f} (error {:+.4f}); generate loops in {} "
            "and resampling in {} of {} stage steps; {:.3g} model evaluations; {:.1f}s".format(
                name,
                particles,
                float(result.log_z),
                float(result.log_z_se),
                float(result.log_z) - exact,
                grown,
                resampled,
                8 * len(result.stages),
                result.evaluations,
                time.perf_counter() - start,
            )
        )


if __name__ == "__main__":
    main()

"""Annealed importance sampling of an RBM fitted to binarised scikit-learn digits.

An RBM with 64 visible and 16 hidden units is trained by contrastive divergence on
1500 of the 8 x 8 digits (pixel > 8 set to 1); its visible units are the Pyro model
:func:`pyro_gwg.models.rbm` (hidden units summed out). With 16 hidden units the
exact log normaliser is a sum over 2^16 hidden states, so the AIS estimates
(:func:`pyro_gwg.contrib.estimators.ais`, GWG and Gibbs transitions, annealing from the
Bernoulli distribution fitted to the training images as in Grathwohl et al. 2021,
Appendix I.2.1) can be checked against it, together with the test-set log-likelihood.

Run: ``python examples/ais_rbm.py`` (needs scikit-learn; well under a minute)
"""

import time

import pyro
import torch
import torch.nn.functional as F

from pyro_gwg import GWG, Gibbs
from pyro_gwg.contrib.estimators import ais, ais_log_likelihood, log_likelihood
from pyro_gwg.contrib.train import train_rbm
from pyro_gwg.models import RBMParams, rbm, rbm_log_partition


def digits_rbm(num_hidden: int = 16, epochs: int = 30, seed: int = 0):
    """A CD-trained RBM on binarised digits: ``(params, train [1500, 64], test, log Z)``,
    ``log Z`` the exact log normaliser of the model ``rbm(*params)``."""
    from sklearn.datasets import load_digits

    images = torch.tensor(load_digits().data > 8, dtype=torch.get_default_dtype())
    shuffled = images[torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))]
    train, test = shuffled[:1500], shuffled[1500:]
    params: RBMParams = train_rbm(train, num_hidden, epochs=epochs, lr=1e-2, seed=seed)
    log_z = float(rbm_log_partition(params) - F.softplus(params.visible_bias.double()).sum())
    return params, train, test, log_z


def main() -> None:
    torch.set_num_threads(1)
    pyro.set_rng_seed(0)
    params, train, test, exact = digits_rbm()
    print("exact log Z = {:.4f} (2^16 hidden states summed)".format(exact))
    header = ("kernel", "T", "log Z", "se", "error", "ESS", "s")
    print("{:<6} {:>6} {:>10} {:>8} {:>8} {:>7} {:>6}".format(*header))
    for kernel in (GWG, Gibbs):
        for num_steps in (100, 1000):
            start = time.perf_counter()
            result = ais(
                rbm,
                kernel(),
                num_particles=200,
                num_steps=num_steps,
                base={"v": train},  # factorised Bernoulli fitted to the training images
                model_args=tuple(params),
            )
            print(
                "{:<6} {:>6} {:>10.4f} {:>8.4f} {:>+8.4f} {:>7.1f} {:>6.1f}".format(
                    kernel.__name__,
                    num_steps,
                    float(result.log_z),
                    float(result.log_z_se),
                    float(result.log_z) - exact,
                    float(result.ess),
                    time.perf_counter() - start,
                )
            )
    test_data = {"v": test}
    estimated = ais_log_likelihood(
        rbm,
        GWG(),
        test_data,
        model_args=tuple(params),
        num_particles=200,
        num_steps=1000,
        base={"v": train},
    )
    true = log_likelihood(rbm, test_data, exact, model_args=tuple(params)).mean()
    print(
        "test log-likelihood per image: AIS {:.3f} +- {:.3f}, exact {:.3f}".format(
            float(estimated.mean), float(estimated.log_z_se), float(true)
        )
    )


if __name__ == "__main__":
    main()

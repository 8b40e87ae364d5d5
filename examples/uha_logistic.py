"""Uncorrected Hamiltonian annealing on Bayesian logistic regression (about a minute).

The model, :func:`pyro_gwg.contrib.models.logistic_regression`, is an ordinary Pyro
model (31 coefficients, scikit-learn's breast cancer data). ``UHA`` reads its posterior
in unconstrained space from Pyro's ``initialize_model``. The steps follow Geffner &
Domke (2021):

1. fit the mean-field Gaussian q by plain VI (``fit(bridges=False)``);
2. tune UHA with 16 bridges: q, step size, damping, schedule and mass together;
3. compare its lower bound on log p(y) with plain VI and with Hamiltonian AIS using the
   same parameters, and look at the posterior draws.

Run: ``python examples/uha_logistic.py`` (needs scikit-learn).
"""

import pyro
import torch

from pyro_gwg.contrib.estimators import UHA
from pyro_gwg.contrib.models import breast_cancer, logistic_regression


def bound(uha: UHA, num_particles: int = 256, bridges: bool = True) -> str:
    with torch.no_grad():
        result = uha(num_particles, bridges=bridges)
    return "{:9.3f} +- {:.3f}".format(float(result.elbo), result.elbo_stderr)


def main(num_bridges: int = 16, vi_steps: int = 1000, tune_steps: int = 300) -> dict:
    torch.set_num_threads(1)
    pyro.set_rng_seed(0)
    X, y = breast_cancer()
    uha = UHA(logistic_regression, (X, y), num_bridges=num_bridges, step_size=0.2)
    print("Bayesian logistic regression: {} observations, {} coefficients".format(*X.shape))

    uha.fit(vi_steps, num_particles=16, lr=0.05, bridges=False)
    vi = bound(uha, bridges=False)
    print("plain VI (q only)              ELBO {}".format(vi))
    print("UHA, K = {:3d}, before tuning   bound {}".format(num_bridges, bound(uha)))

    uha.fit(tune_steps, num_particles=16, lr=0.02)
    tuned = bound(uha)
    print("UHA, K = {:3d}, tuned           bound {}".format(num_bridges, tuned))
    with torch.no_grad():
        betas = uha.betas
        print(
            "  step size {:.3f}, damping {:.3f}, betas {:.3f} ... {:.3f}".format(
                float(uha.step_size), float(uha.damping), float(betas[0]), float(betas[-1])
            )
        )
    for k in (num_bridges, 8 * num_bridges):
        hais = uha.hamiltonian_ais(256, num_bridges=k)
        print(
            "Hamiltonian AIS, K = {:3d}       bound {:9.3f}, log Z estimate {:9.3f} "
            "(acceptance {:.2f})".format(
                k, float(hais.elbo), float(hais.log_evidence), hais.acceptance_rate
            )
        )

    with torch.no_grad():
        draws = uha(1000).constrained()["w"]
    order = draws.mean(0).abs().argsort(descending=True)[:5]
    print("largest coefficients (posterior mean +- sd from the UHA draws):")
    for j in order.tolist():
        name = "intercept" if j == 0 else "feature {}".format(j - 1)
        print("  {:10s} {:7.3f} +- {:.3f}".format(name, draws[:, j].mean(), draws[:, j].std()))
    return {"vi": vi, "uha": tuned}


if __name__ == "__main__":
    main()

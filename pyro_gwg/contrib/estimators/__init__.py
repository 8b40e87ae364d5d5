"""Estimators of normalising constants: annealed importance sampling (AIS) and the
adaptive resample-move algorithm (ARM), with any pyro-gwg kernel as the transition; for
continuous targets, uncorrected Hamiltonian annealing (UHA, a tunable lower bound on
log Z) and Hamiltonian AIS."""

from pyro_gwg.contrib.estimators import weights
from pyro_gwg.contrib.estimators.ais import (
    AISResult,
    FactorisedBase,
    LogLikelihood,
    ais,
    ais_log_likelihood,
    annealing_schedule,
    log_likelihood,
)
from pyro_gwg.contrib.estimators.arm import (
    ARMResult,
    Stage,
    activity_order,
    arm,
    ising_stages,
    rbm_stages,
)
from pyro_gwg.contrib.estimators.uha import UHA, AnnealingResult, hamiltonian_ais

__all__ = [
    "AISResult",
    "ARMResult",
    "Stage",
    "activity_order",
    "arm",
    "ising_stages",
    "rbm_stages",
    "FactorisedBase",
    "LogLikelihood",
    "ais",
    "ais_log_likelihood",
    "annealing_schedule",
    "log_likelihood",
    "weights",
    "UHA",
    "AnnealingResult",
    "hamiltonian_ais",
]

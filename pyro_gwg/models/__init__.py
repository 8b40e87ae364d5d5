"""Classic discrete targets written as ordinary, batch-friendly Pyro models."""

from pyro_gwg._deprecated import moved_attribute
from pyro_gwg.models.ebm import binary_ebm, categorical_ebm, mlp_energy
from pyro_gwg.models.fhmm import (
    FHMMData,
    FHMMParams,
    factorial_hmm,
    fhmm_prior_sample,
    fhmm_time_blocks,
    random_fhmm,
)
from pyro_gwg.models.ising import (
    cut_value,
    erdos_renyi_couplings,
    ising,
    ising_denoising,
    lattice_bonds,
    lattice_couplings,
    lattice_ising,
    maxcut_couplings,
    noisy_image,
)
from pyro_gwg.models.ordinal import (
    IntegerUniform,
    OrdinalMixtureMoments,
    ordinal_mixture,
    ordinal_mixture_moments,
)
from pyro_gwg.models.potts import PottsParams, lattice_potts, potts, random_potts
from pyro_gwg.models.rbm import (
    RBMParams,
    block_gibbs,
    block_gibbs_step,
    categorical_rbm,
    random_categorical_rbm,
    random_rbm,
    rbm,
    rbm_log_density,
    rbm_log_partition,
    train_rbm,
)
from pyro_gwg.models.variable_selection import (
    SpikeAndSlabCoefficients,
    VariableSelectionExact,
    spike_and_slab_coefficients,
    spike_and_slab_regression,
    variable_selection,
    variable_selection_data,
    variable_selection_exact,
)

__all__ = [
    "FHMMData",
    "FHMMParams",
    "IntegerUniform",
    "OrdinalMixtureMoments",
    "PottsParams",
    "RBMParams",
    "SpikeAndSlabCoefficients",
    "VariableSelectionExact",
    "binary_ebm",
    "block_gibbs",
    "block_gibbs_step",
    "categorical_ebm",
    "categorical_rbm",
    "cut_value",
    "erdos_renyi_couplings",
    "factorial_hmm",
    "fhmm_prior_sample",
    "fhmm_time_blocks",
    "ising",
    "ising_denoising",
    "lattice_bonds",
    "lattice_couplings",
    "lattice_ising",
    "lattice_potts",
    "maxcut_couplings",
    "mlp_energy",
    "noisy_image",
    "ordinal_mixture",
    "ordinal_mixture_moments",
    "potts",
    "random_fhmm",
    "random_categorical_rbm",
    "random_potts",
    "random_rbm",
    "rbm",
    "rbm_log_density",
    "rbm_log_partition",
    "spike_and_slab_coefficients",
    "spike_and_slab_regression",
    "train_rbm",
    "variable_selection",
    "variable_selection_data",
    "variable_selection_exact",
]

# names that moved to pyro_gwg.contrib: old name -> new module
_MOVED = dict.fromkeys(
    (
        "FOUR_MODE_CENTRES",
        "HIMMELBLAU_MODES",
        "GaussianMixture",
        "breast_cancer",
        "four_mode_tanh",
        "grid_moments",
        "himmelblau",
        "linear_regression",
        "linear_regression_log_evidence",
        "logistic_regression",
        "logistic_regression_log_density",
        "mode_probabilities",
        "nearest_mode",
    ),
    "pyro_gwg.contrib.models",
)
_MOVED["RBMBlockGibbs"] = "pyro_gwg.contrib.kernels"


def __getattr__(name: str):
    return moved_attribute(__name__, name, _MOVED)

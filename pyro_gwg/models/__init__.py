"""Classic discrete targets written as ordinary, batch-friendly Pyro models."""

from pyro_gwg.models.ebm import binary_ebm, mlp_energy
from pyro_gwg.models.fhmm import (
    FHMMData,
    FHMMParams,
    factorial_hmm,
    fhmm_prior_sample,
    fhmm_time_blocks,
    random_fhmm,
)
from pyro_gwg.models.ising import (
    erdos_renyi_couplings,
    ising,
    ising_denoising,
    lattice_bonds,
    lattice_couplings,
    lattice_ising,
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
    RBMBlockGibbs,
    RBMParams,
    block_gibbs,
    block_gibbs_step,
    random_rbm,
    rbm,
    rbm_log_density,
    rbm_log_partition,
    train_rbm,
)
from pyro_gwg.models.variable_selection import (
    VariableSelectionExact,
    variable_selection,
    variable_selection_data,
    variable_selection_exact,
)

__all__ = [
    "IntegerUniform",
    "OrdinalMixtureMoments",
    "VariableSelectionExact",
    "FHMMData",
    "FHMMParams",
    "PottsParams",
    "RBMBlockGibbs",
    "RBMParams",
    "binary_ebm",
    "block_gibbs",
    "block_gibbs_step",
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
    "mlp_energy",
    "noisy_image",
    "ordinal_mixture",
    "ordinal_mixture_moments",
    "potts",
    "random_fhmm",
    "random_potts",
    "random_rbm",
    "rbm",
    "rbm_log_density",
    "rbm_log_partition",
    "train_rbm",
    "variable_selection",
    "variable_selection_data",
    "variable_selection_exact",
]

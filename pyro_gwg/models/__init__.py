"""Classic discrete targets written as ordinary, batch-friendly Pyro models."""

from pyro_gwg.models.ising import ising_denoising, lattice_bonds, lattice_ising, noisy_image

__all__ = ["ising_denoising", "lattice_bonds", "lattice_ising", "noisy_image"]

"""What is specific to the learnable models: the coupling helpers and the exact
Ising / Potts preconditioners."""

import pytest
import torch
from exactness import accept_probs

from pyro_gwg import PAVG
from pyro_gwg.contrib.train import (
    coupling_rmse,
    ising_preconditioner,
    potts_preconditioner,
    symmetric_couplings,
    symmetric_potts_couplings,
)
from pyro_gwg.models import ising, potts, random_potts


def test_coupling_helpers():
    raw = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    sym = symmetric_couplings(raw)
    assert torch.allclose(sym, sym.T) and bool((sym.diagonal() == 0).all())
    raw_potts = torch.randn(3, 3, 2, 2, generator=torch.Generator().manual_seed(1))
    potts_couplings = symmetric_potts_couplings(raw_potts)
    assert torch.allclose(potts_couplings, potts_couplings.permute(1, 0, 3, 2))
    assert bool((potts_couplings[range(3), range(3)] == 0).all())
    assert float(coupling_rmse(torch.ones(2, 2), torch.zeros(2, 2))) == 1.0
    with pytest.raises(ValueError, match="shapes differ"):
        coupling_rmse(torch.ones(2, 2), torch.zeros(3))


def test_ising_and_potts_preconditioners_are_the_hessians():
    # with the Hessian of a log-quadratic target PAVG is block Gibbs: every proposal is
    # accepted (Rhodes & Gutmann 2022, end of Section 3.2.1)
    couplings = symmetric_couplings(torch.randn(5, 5, generator=torch.Generator().manual_seed(0)))
    bias = torch.randn(5, generator=torch.Generator().manual_seed(1))
    matrix = ising_preconditioner(couplings)
    assert torch.allclose(matrix, 8 * couplings)
    kernel = PAVG(ising, preconditioner=matrix, step_size=1.0, adapt_step_size=False)
    assert torch.allclose(accept_probs(kernel, couplings, bias), torch.ones(()).double())
    couplings, bias = random_potts(4, 3, coupling_scale=0.8, seed=2)
    matrix = potts_preconditioner(couplings)
    assert matrix.shape == (12, 12) and torch.allclose(matrix, matrix.T)
    kernel = PAVG(potts, preconditioner=matrix, step_size=1.0, adapt_step_size=False)
    assert torch.allclose(accept_probs(kernel, couplings, bias), torch.ones(()).double())
    # with half the Hessian some proposals are rejected
    kernel = PAVG(potts, preconditioner=matrix / 2, step_size=1.0, adapt_step_size=False)
    assert float(accept_probs(kernel, couplings, bias).mean()) < 0.99

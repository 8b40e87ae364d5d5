"""The energy compiled whole (pyro_gwg/bridge/compiled.py)."""

import pyro
import pytest
import torch
from small_models import SUITE

from pyro_gwg import ModelDensity

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


@pytest.mark.parametrize("num_chains", [1, 4])
@pytest.mark.parametrize("name", ["coupled_binary_field", "enumerated_switch", "mixed_kinds"])
def test_jit_compiled_value_and_grad_equals_eager(name, num_chains):
    model, args = SUITE[name]
    eager = ModelDensity(model, args)
    compiled = ModelDensity(model, args, jit_compile=True)
    pyro.set_rng_seed(0)
    for _ in range(3):
        codes = eager.initial_codes(num_chains)
        f, grad = eager.value_and_grad(codes)
        f_jit, grad_jit = compiled.value_and_grad(codes)
        assert torch.allclose(f, f_jit, atol=1e-5) and torch.allclose(grad, grad_jit, atol=1e-5)

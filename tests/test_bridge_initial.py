"""Initial states (pyro_gwg/bridge/initial.py): found, checked, and refused with the sites
to blame."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide.initialization import init_to_value

from pyro_gwg import ModelDensity
from pyro_gwg.bridge.errors import TORCH_OOM as OUT_OF_MEMORY

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def test_infinite_log_density_at_the_initial_state_names_the_site():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("hard", torch.where(x.sum(-1) > 5, 0.0, -float("inf")))

    with pytest.raises(ValueError, match="initial state is -inf.*'hard'"):
        ModelDensity(model).initial_codes(1)


def test_invalid_user_initial_state_is_refused():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("not_all_zero", torch.where(x.sum(-1) > 0, 0.0, -float("inf")))

    strategy = init_to_value(values={"x": torch.zeros(3)})
    with pytest.raises(ValueError, match="'not_all_zero'.*init_strategy"):
        ModelDensity(model, init_strategy=strategy).initial_codes(1)


def test_an_allocation_failure_in_batched_initialisation_surfaces():
    def model():
        with pyro.plate("bits", 3):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        if x.dim() > 1:  # the batched run of the initial values
            raise OUT_OF_MEMORY("out of memory (simulated)")

    with pytest.raises(OUT_OF_MEMORY):
        ModelDensity(model).initial_codes(8)

"""NaN and +inf log densities met during a run (pyro_gwg/bridge/nan.py)."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide import init_to_value

from pyro_gwg import ModelDensity, UnsupportedModelError

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_nan_or_infinite_log_density_names_the_site_and_the_state(bad):
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        pyro.factor("spike", torch.where(x.sum(-1) == 3, torch.tensor(bad), torch.tensor(0.0)))

    # (the first run of the model validates its distributions: it starts where the
    # density is finite, not at a prior draw, [1, 1, 1] one time in eight)
    start = init_to_value(values={"x": torch.tensor([0.0, 1.0, 1.0])})
    energy = ModelDensity(model, init_strategy=start)
    assert torch.isfinite(energy.log_joint(torch.tensor([[0, 1, 1]]))).all()
    # (with validation on, Pyro itself rejects a NaN factor; MCMC runs without it)
    with pyro.validation_enabled(False):
        for evaluate in (energy.log_joint, lambda c: energy.value_and_grad(c)[0]):
            with pytest.raises(
                UnsupportedModelError,
                match="log density is {}.*'x': \\[1, 1, 1\\].*'spike'".format(bad),
            ):
                evaluate(torch.tensor([[0, 1, 1], [1, 1, 1]]))

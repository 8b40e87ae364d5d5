"""The wording of the bridge's errors (pyro_gwg/bridge/errors.py)."""

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_gwg import ModelDensity, UnsupportedModelError

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def test_an_observation_of_the_wrong_dtype_is_named():
    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5).expand([3]).to_event(1))
        logits = x.sum(-1, keepdim=True).expand(2)
        pyro.sample("y", dist.Bernoulli(logits=logits).to_event(1), obs=torch.tensor([1, 0]))

    with pytest.raises(
        UnsupportedModelError, match="observed site 'y' \\(Bernoulli\\).*int64.*obs=y.float"
    ):
        ModelDensity(model).initial_codes(4)

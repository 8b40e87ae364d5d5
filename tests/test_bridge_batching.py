"""Evaluating several states (pyro_gwg/bridge/batching.py): plate, vmap, one at a time."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from small_models import SUITE, VMAP_OR_LOOP, VMAP_RUNS_PYRO

from pyro_gwg import BatchingWarning, ModelDensity, UnsupportedModelError

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


@pytest.mark.parametrize("name", sorted(SUITE))
def test_batched_chains_equal_chain_by_chain_evaluation(name):
    model, args = SUITE[name]
    energy = ModelDensity(model, args)
    pyro.set_rng_seed(0)
    codes = energy.initial_codes(5)
    f, grad = energy.value_and_grad(codes)
    for c in range(5):
        f_c, grad_c = energy.value_and_grad(codes[c : c + 1])
        assert torch.allclose(f[c : c + 1], f_c, atol=1e-5)
        assert torch.allclose(grad[c : c + 1], grad_c, atol=1e-5)


def _value_dependent_mean(y):
    x = pyro.sample("x", dist.Bernoulli(0.4).expand([2]).to_event(1))
    mean = 2.0 if x[0].item() else -1.0  # control flow on a latent value, same sites
    pyro.sample("y", dist.Normal(mean + x[1], 1.0), obs=y)


def test_control_flow_that_keeps_the_sites_runs_eagerly_one_state_at_a_time():
    energy = ModelDensity(_value_dependent_mean, (torch.tensor(0.5),))
    assert energy.value_reads and energy.compilable == ()
    codes = torch.tensor([[0, 0], [1, 0], [1, 1]])
    with pytest.warns(BatchingWarning, match="reads latent values.*one at a time"):
        f = energy.log_joint(codes)
    assert energy.batching == "loop"
    for c in range(3):
        assert torch.allclose(f[c : c + 1], energy.log_joint(codes[c : c + 1]))
    with pytest.raises(UnsupportedModelError, match="jit_compile=True cannot compile.*item"):
        ModelDensity(_value_dependent_mean, (torch.tensor(0.5),), jit_compile=True).value_and_grad(
            codes[:1]
        )


def test_model_that_does_not_broadcast_is_evaluated_exactly_with_one_warning():
    def model():
        with pyro.plate("bits", 3):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("total", x.sum())  # sums over the chain dimension too

    codes = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 0]])
    energy = ModelDensity(model)
    with pytest.warns(
        BatchingWarning, match=f"'total'.*{VMAP_OR_LOOP}.*x.sum\\(-1, keepdim=True\\)"
    ):
        f, grad = energy.value_and_grad(codes)
    assert energy.batching == ("vmap" if VMAP_RUNS_PYRO else "loop")
    for c in range(3):
        f_c, g_c = energy.value_and_grad(codes[c : c + 1])
        assert torch.allclose(f[c : c + 1], f_c) and torch.allclose(grad[c : c + 1], g_c)
    with pytest.raises(UnsupportedModelError, match="does not broadcast.*'total'"):
        ModelDensity(model).check_vectorized(codes)


def test_vmap_runs_pyro_models_on_the_torch_ci_runs():
    # the probe above chooses what the batching tests expect; on the torch that CI
    # runs it must find vmap working, so that it cannot hide a regression there
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 13):
        assert VMAP_RUNS_PYRO

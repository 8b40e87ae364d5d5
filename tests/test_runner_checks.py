"""pyro_gwg.runner.checks: every argument of pyro_gwg.MCMC is checked, with an error
that names it."""

import pytest
import torch
from small_models import SUITE

from pyro_gwg import GWG, MCMC


def test_save_params_must_name_latent_sites():
    model, args = SUITE["mixed_kinds"]
    mcmc = MCMC(GWG(model), 5, save_params=["z", "w"], disable_progbar=True)
    with pytest.raises(ValueError, match="save_params names 'w', which is not a latent.*'b'"):
        mcmc.run(*args)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_samples": 0}, ValueError, "num_samples must be a positive integer"),
        ({"num_samples": -5}, ValueError, "num_samples must be a positive integer"),
        ({"num_samples": 10.5}, TypeError, "num_samples must be an integer"),
        ({"num_samples": 10.0}, TypeError, "num_samples must be an integer"),
        ({"num_samples": True}, TypeError, "num_samples must be an integer"),
        ({"num_samples": "10"}, TypeError, "num_samples must be an integer"),
        ({"warmup_steps": -3}, ValueError, "warmup_steps must be a non-negative integer"),
        ({"warmup_steps": 2.0}, TypeError, "warmup_steps must be an integer"),
        ({"num_chains": 0}, ValueError, "num_chains must be a positive integer"),
        ({"num_chains": 2.0}, TypeError, "num_chains must be an integer"),
        ({"num_chains": False}, TypeError, "num_chains must be an integer"),
        ({"thinning": 0}, ValueError, "thinning must be a positive integer"),
        ({"thinning": 2.0}, TypeError, "thinning must be an integer"),
        ({"thinning": 11}, ValueError, "thinning=11 is more than num_samples=10"),
        ({"chain_method": "threads"}, ValueError, "chain_method must be one of"),
        ({"chain_method": None}, ValueError, "chain_method must be one of"),
        ({"hook_fn": 3}, TypeError, "hook_fn must be callable"),
        ({"device": "gpu0"}, ValueError, "device 'gpu0' is not a torch device"),
        ({"device": 1.5}, TypeError, "device must be"),
        ({"disable_progbar": "yes"}, TypeError, "disable_progbar must be a bool"),
        ({"disable_validation": 1}, TypeError, "disable_validation must be a bool"),
        ({"mp_context": "threads"}, ValueError, "mp_context must be one of"),
        ({"initial_params": [1, 0]}, TypeError, "initial_params must be a dict"),
        ({"initial_params": 4}, TypeError, "fourth positional argument is initial_params"),
        ({"transforms": {"x": "exp"}}, ValueError, "transforms has an entry for 'x'.*None"),
        ({"transforms": "exp"}, TypeError, "transforms must be a dict"),
        ({"save_params": "x"}, TypeError, "save_params must be a list of site names"),
        ({"save_params": [0]}, TypeError, "save_params must hold site names"),
        ({"save_params": []}, ValueError, "save_params is empty"),
        ({"disable_validation": "no"}, TypeError, "disable_validation must be a bool"),
        ({"initial_params": {"x": "ones"}}, TypeError, "initial_params\\['x'\\]"),
        (
            {"initial_params": {"x": torch.ones(3, 5)}, "num_chains": 2},
            ValueError,
            "initial_params\\['x'\\] has a leading \\(chain\\) dimension of size 3.*num_chains=2",
        ),
        (
            {"initial_params": {"x": torch.tensor(1.0)}, "num_chains": 2},
            ValueError,
            "initial_params\\['x'\\] is a scalar",
        ),
    ],
)
def test_every_argument_is_checked_up_front(kwargs, error, match):
    model, _ = SUITE["coupled_binary_field"]
    kwargs = {"num_samples": 10, **kwargs}
    with pytest.raises(error, match=match):
        MCMC(GWG(model), **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_cuda_device_without_cuda_is_refused():
    model, _ = SUITE["coupled_binary_field"]
    with pytest.raises(ValueError, match="device 'cuda' .* CUDA is not available"):
        MCMC(GWG(model), 10, device="cuda")


def test_numpy_integers_and_array_initial_params_are_accepted():
    np = pytest.importorskip("numpy")
    model, args = SUITE["coupled_binary_field"]
    start = np.array([[1, 1, 0, 0, 1], [0, 0, 0, 1, 1]])
    mcmc = MCMC(
        GWG(model),
        num_samples=np.int64(6),
        warmup_steps=np.int32(0),
        num_chains=np.int16(2),
        thinning=np.int64(2),
        initial_params={"x": start.tolist()},
        disable_progbar=True,
    )
    assert isinstance(mcmc.initial_params["x"], torch.Tensor)
    assert type(mcmc.num_samples) is int and type(mcmc.num_chains) is int
    mcmc.run(*args)
    assert mcmc.get_samples(group_by_chain=True)["x"].shape == (2, 3, 5)


def test_initial_params_for_an_unknown_site_are_refused():
    model, args = SUITE["coupled_binary_field"]
    start = {"x": torch.zeros(2, 5), "w": torch.zeros(2, 3)}
    mcmc = MCMC(GWG(model), 5, num_chains=2, initial_params=start, disable_progbar=True)
    with pytest.raises(ValueError, match="initial_params has a value for 'w'.*latent sites: 'x'"):
        mcmc.run(*args)

"""pyro_gwg.runner.many: fit_many in this process (on Ray: test_cluster)."""

import pytest
import torch
from test_cluster import bits_model, eager_gwg

from pyro_gwg import GWG, fit_many


def test_fit_many_checks_its_data_sets():
    with pytest.raises(TypeError, match="datasets must be a sequence"):
        fit_many(bits_model, GWG, {"y": 1.0}, 10)
    with pytest.raises(ValueError, match="datasets is empty"):
        fit_many(bits_model, GWG, [], 10)
    with pytest.raises(TypeError, match=r"datasets\[1\] must be a tuple"):
        fit_many(bits_model, GWG, [(torch.tensor(0.0),), torch.tensor(1.0)], 10)
    with pytest.raises(TypeError, match="kernel must build a kernel"):
        fit_many(bits_model, GWG(bits_model), [()], 10)
    with pytest.raises(ValueError, match="ray_remote_args is for Ray runs"):
        fit_many(bits_model, GWG, [()], 10, ray_remote_args={"num_cpus": 1}, progress_bar=False)


def test_fit_many_runs_each_data_set_under_its_own_seed():
    data = [{"y": torch.tensor(0.0)}, ((torch.tensor(3.0),), {}), (torch.tensor(3.0),)]
    fits = fit_many(bits_model, eager_gwg, data, 40, 10, num_chains=2, progress_bar=False)
    z = [f.get_samples()["z"].float() for f in fits]
    assert z[0].mean() < z[1].mean()  # y = 0 against y = 3
    assert not torch.equal(z[1], z[2])  # same data, different seeds
    again = fit_many(bits_model, eager_gwg, data, 40, 10, num_chains=2, progress_bar=False)
    assert torch.equal(again[1].get_samples()["z"], fits[1].get_samples()["z"])

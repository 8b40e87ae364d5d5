"""Contrastive divergence for RBMs: training raises the likelihood of the data."""

import torch

from pyro_gwg.contrib.train import train_rbm
from pyro_gwg.models import RBMParams, rbm_log_density, rbm_log_partition


def test_training_raises_the_likelihood_of_the_data():
    torch.manual_seed(0)
    prototypes = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]]).float()
    data = prototypes[torch.randint(0, 2, (200,))]
    data = torch.where(torch.rand_like(data) < 0.05, 1 - data, data)

    def mean_log_likelihood(params):
        return float(rbm_log_density(data, params).mean() - rbm_log_partition(params))

    untrained = RBMParams(torch.zeros(4, 6), torch.zeros(6), torch.zeros(4))
    trained = train_rbm(data, num_hidden=4, epochs=30, batch_size=20, lr=0.05, seed=0)
    again = train_rbm(data, num_hidden=4, epochs=30, batch_size=20, lr=0.05, seed=0)
    assert torch.equal(trained.weights, again.weights)  # seeded
    assert mean_log_likelihood(trained) > mean_log_likelihood(untrained) + 1.0

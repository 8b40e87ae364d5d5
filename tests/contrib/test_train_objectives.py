"""The pure functions of the PCD update on their own: the surrogate's gradient
(Grathwohl et al. 2021, Eq. 12), the penalties, the energy regulariser, the warm-up
schedule and the moving average."""

import pytest
import torch

from pyro_gwg.contrib.train import (
    ema_update,
    energy_regulariser,
    group_l1_penalty,
    l1_penalty,
    pcd_objective,
    warmup_factor,
)


def test_pcd_objective_gradient_is_minus_equation_12():
    # f_theta(x) = theta . phi(x): the gradient is mean phi(chains) - mean phi(data)
    theta = torch.tensor([0.3, -0.2, 0.5], requires_grad=True)
    data_phi = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    chain_phi = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    pcd_objective(data_phi @ theta, chain_phi @ theta).backward()
    assert torch.allclose(theta.grad, chain_phi.mean(0) - data_phi.mean(0))


def test_penalties():
    value = torch.tensor([[1.0, -2.0], [0.0, 3.0]])
    assert float(l1_penalty(value)) == 6.0
    blocks = torch.zeros(2, 2, 2, 2)
    blocks[0, 1] = torch.tensor([[3.0, 0.0], [0.0, 4.0]])  # norm 5
    blocks[1, 0] = torch.tensor([[1.0, 1.0], [1.0, 1.0]])  # norm 2
    assert float(group_l1_penalty(blocks, group_dims=2)) == pytest.approx(7.0)
    assert float(group_l1_penalty(value, group_dims=1)) == pytest.approx(5**0.5 + 3.0)
    with pytest.raises(ValueError, match="group_dims"):
        group_l1_penalty(value, group_dims=3)


def test_energy_regulariser_value_and_gradient():
    data_f = torch.tensor([1.0, -3.0], requires_grad=True)
    chain_f = torch.tensor([2.0, 0.0, 4.0], requires_grad=True)
    value = energy_regulariser(data_f, chain_f)
    assert float(value.detach()) == pytest.approx((1 + 9) / 2 + (4 + 0 + 16) / 3)
    value.backward()
    assert torch.allclose(data_f.grad, data_f.detach())  # d/df of mean f^2: 2 f / B
    assert torch.allclose(chain_f.grad, 2 * chain_f.detach() / 3)


def test_warmup_factor_is_linear_then_one():
    assert [warmup_factor(t, 4) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert warmup_factor(0, 1) == 1.0 and warmup_factor(7, 0) == 1.0


def test_ema_update_is_the_recursion():
    average = torch.tensor([1.0, 2.0])
    value = torch.tensor([3.0, -2.0])
    assert torch.allclose(ema_update(average, value, 0.75), torch.tensor([1.5, 1.0]))
    assert torch.equal(ema_update(average, value, 0.0), value)

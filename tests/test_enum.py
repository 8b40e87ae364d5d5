"""Exact posteriors by enumeration."""

import itertools

import pyro
import pyro.distributions as dist
import pytest
import torch
from small_models import BOUNDS, SUITE

from pyro_gwg import UnsupportedModelError, exact_posterior


def independent_bits(y):
    with pyro.plate("bits", 3):
        x = pyro.sample("x", dist.Bernoulli(logits=torch.tensor([0.3, -1.0, 2.0])))
        pyro.sample("y", dist.Normal(x, 1.0), obs=y)


Y = torch.tensor([0.2, 1.4, -0.5])


def test_marginals_and_normaliser_of_independent_bits():
    post = exact_posterior(independent_bits, Y)
    assert post.num_states == 8
    logits = torch.tensor([0.3, -1.0, 2.0])
    like1 = dist.Normal(1.0, 1.0).log_prob(Y)
    like0 = dist.Normal(0.0, 1.0).log_prob(Y)
    post_logit = logits + like1 - like0
    assert torch.allclose(post.flat_marginals()[:, 1], torch.sigmoid(post_logit), atol=1e-6)
    evidence = (
        torch.stack(
            [
                dist.Bernoulli(logits=logits).log_prob(torch.zeros(3)) + like0,
                dist.Bernoulli(logits=logits).log_prob(torch.ones(3)) + like1,
            ]
        )
        .logsumexp(0)
        .sum()
    )
    assert torch.allclose(post.log_normalizer, evidence, atol=1e-5)
    pair = post.pairwise_marginals()
    m = post.flat_marginals()
    assert torch.allclose(pair[0, 1], torch.outer(m[0], m[1]), atol=1e-6)
    assert torch.allclose(pair[2, 2], torch.diag(m[2]), atol=1e-6)
    assert torch.allclose(post.mean()["x"], m[:, 1])
    assert set(post.marginals()) == {"x"} and post.marginals()["x"].shape == (3, 2)


def test_state_numbering_round_trips():
    post = exact_posterior(*SUITE["mixed_kinds"][:1], *SUITE["mixed_kinds"][1])
    index = torch.arange(post.num_states)
    assert torch.equal(post.state_index(post.states(index)), index)
    states = {tuple(s) for s in post.states().tolist()}
    assert len(states) == post.num_states == 2 * 2 * 4 * 3 * 4


def test_exact_draws_follow_the_posterior():
    pyro.set_rng_seed(0)
    post = exact_posterior(independent_bits, Y)
    draws = post.sample(20000)["x"]
    assert draws.shape == (20000, 3)
    assert torch.allclose(draws.float().mean(0), post.flat_marginals()[:, 1], atol=0.015)


def test_enumeration_agrees_with_brute_force_for_a_mixed_model():
    model, (y,) = SUITE["mixed_kinds"]
    post = exact_posterior(model, y)
    z_locs = torch.tensor([-1.0, 0.0, 1.0, 2.0])
    z_logits = torch.tensor([0.0, 0.5, -0.5, 0.2]).log_softmax(-1)
    c_logits = torch.tensor([0.1, -0.3, 0.2]).log_softmax(-1)
    joint = {}
    for b0, b1, z, c, k in itertools.product(range(2), range(2), range(4), range(3), range(4)):
        lp = (
            dist.Bernoulli(0.3).log_prob(torch.tensor([b0, b1]).float()).sum()
            + z_logits[z]
            + c_logits[c]
            + dist.Binomial(3, 0.5).log_prob(torch.tensor(float(k)))
            + dist.Normal(b0 + b1 + z_locs[z] + 0.5 * c + 0.3 * k, 1.0).log_prob(y)
        )
        joint[(b0, b1, z, c, k)] = lp
    log_z = torch.stack(list(joint.values())).logsumexp(0)
    assert torch.allclose(post.log_normalizer, log_z, atol=1e-5)
    for state, lp in list(joint.items())[::37]:
        index = post.state_index(torch.tensor([state]))
        assert torch.allclose(post.log_probs[index], lp - log_z, atol=1e-5)


def test_models_that_do_not_batch_are_enumerated_state_by_state():
    def unbatched(y):
        x = pyro.sample("x", dist.Bernoulli(0.4).expand([3]).to_event(1))
        pyro.factor("total", 0.7 * x.sum())  # sums over every dimension
        pyro.sample("y", dist.Normal(x.sum(), 1.0), obs=y)

    def batched(y):
        x = pyro.sample("x", dist.Bernoulli(0.4).expand([3]).to_event(1))
        pyro.factor("total", 0.7 * x.sum(-1))
        pyro.sample("y", dist.Normal(x.sum(-1), 1.0), obs=y)

    a = exact_posterior(unbatched, torch.tensor(2.0))
    b = exact_posterior(batched, torch.tensor(2.0))
    assert torch.allclose(a.log_probs, b.log_probs, atol=1e-6)


def test_enumerated_sites_stay_summed_out():
    model, args = SUITE["enumerated_switch"]
    post = exact_posterior(model, *args)
    assert [s.name for s in post.sites] == ["x"] and post.num_states == 16


def test_too_many_states_is_refused():
    def model():
        pyro.sample("x", dist.Bernoulli(0.5).expand([30]).to_event(1))

    with pytest.raises(ValueError, match="1.07e\\+09 joint states.*max_states"):
        exact_posterior(model)


def test_unbounded_sites_need_a_window():
    model, args = SUITE["binomial_ordinal"]
    with pytest.raises(UnsupportedModelError, match="'n'.*unbounded.*bounds="):
        exact_posterior(model, *args)
    post = exact_posterior(model, *args, bounds=BOUNDS["binomial_ordinal"])
    assert post.num_states == 5 * 7 * 31
    with pytest.raises(ValueError, match="no ordinal latent site"):
        exact_posterior(model, *args, bounds={"k": (0, 1), "missing": (0, 1)})

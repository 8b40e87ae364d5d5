"""Exact posteriors by enumeration."""

import itertools
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC, config_enumerate
from small_models import BOUNDS, BRIDGE, SUITE, VMAP_OR_LOOP, VMAP_RUNS_PYRO

import pyro_gwg
from pyro_gwg import BatchingWarning, ModelDensity, UnsupportedModelError, exact_posterior
from pyro_gwg.enumeration import lift_enumeration


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
    # the log joint is float64 (so are the marginals); the references here are float32
    marginal = post.flat_marginals()[:, 1]
    assert marginal.dtype == torch.float64
    assert torch.allclose(marginal.float(), torch.sigmoid(post_logit), atol=1e-6)
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
    assert torch.allclose(post.log_normalizer.float(), evidence, atol=1e-5)
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
    assert torch.allclose(draws.double().mean(0), post.flat_marginals()[:, 1], atol=0.015)


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
    assert torch.allclose(post.log_normalizer.float(), log_z, atol=1e-5)
    for state, lp in list(joint.items())[::37]:
        index = post.state_index(torch.tensor([state]))
        assert torch.allclose(post.log_probs[index].float(), lp - log_z, atol=1e-5)


def test_models_that_do_not_batch_are_enumerated_exactly_with_a_warning():
    def unbatched(y):
        x = pyro.sample("x", dist.Bernoulli(0.4).expand([3]).to_event(1))
        pyro.factor("total", 0.7 * x.sum())  # sums over every dimension
        pyro.sample("y", dist.Normal(x.sum(), 1.0), obs=y)

    def batched(y):
        x = pyro.sample("x", dist.Bernoulli(0.4).expand([3]).to_event(1))
        pyro.factor("total", 0.7 * x.sum(-1))
        pyro.sample("y", dist.Normal(x.sum(-1), 1.0), obs=y)

    with pytest.warns(BatchingWarning, match=f"first site that differs is 'total'.*{VMAP_OR_LOOP}"):
        a = exact_posterior(unbatched, torch.tensor(2.0))
    assert a.energy.batching == ("vmap" if VMAP_RUNS_PYRO else "loop")  # and said
    b = exact_posterior(batched, torch.tensor(2.0))
    assert torch.allclose(a.log_probs, b.log_probs, atol=1e-6)


def test_enumerated_sites_stay_summed_out():
    model, args = SUITE["enumerated_switch"]
    post = exact_posterior(model, *args)
    assert [s.name for s in post.sites] == ["x"] and post.num_states == 16


def _issue_switch(y):
    # as users write it: x.sum(-1) drops the plate dimension (no broadcasting over chains)
    z = pyro.sample("z", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
    with pyro.plate("p", 3):
        x = pyro.sample("x", dist.Bernoulli(0.2 + 0.6 * z))
    pyro.sample("y", dist.Normal(x.sum(-1) + 2.0 * z, 1.0), obs=y)


def _switch_log_joint(x, y):
    """log p(x, y) of BRIDGE["enumerated_above"] by hand, z summed out."""
    terms = [
        dist.Bernoulli(0.3).log_prob(torch.tensor(float(z)))
        + dist.Bernoulli(0.2 + 0.6 * z).log_prob(x).sum()
        + dist.Normal(x.sum() + 2.0 * z, 1.0).log_prob(y)
        for z in (0, 1)
    ]
    return torch.stack(terms).logsumexp(0)


def _above_and_below_log_joint(x, y):
    """log p(x, y) of BRIDGE["enumerated_above_and_below"] by hand, z and w summed out."""
    count = x.sum()
    logits = torch.stack([count - 1.0, 1.5 - count, torch.tensor(0.0)]).log_softmax(-1)
    terms = [
        dist.Bernoulli(0.35).log_prob(torch.tensor(float(z)))
        + dist.Bernoulli(torch.tensor([0.15, 0.3, 0.2]) + 0.6 * z).log_prob(x).sum()
        + logits[w]
        + dist.Normal(count + 2.0 * z + torch.tensor([-1.0, 0.5, 1.5])[w], 1.0).log_prob(y)
        for z in (0, 1)
        for w in range(3)
    ]
    return torch.stack(terms).logsumexp(0)


@pytest.mark.parametrize(
    "name, by_hand",
    [
        ("enumerated_above", _switch_log_joint),
        ("as_users_write_it", _switch_log_joint),
        ("enumerated_above_and_below", _above_and_below_log_joint),
    ],
)
def test_enumerated_sites_above_and_below_sampled_ones_are_summed_out(name, by_hand):
    # the sampled x's distribution carries the enumeration dimension of z: its value
    # does not, and its latent signature is the same at every state
    model, args = BRIDGE.get(name, (_issue_switch, BRIDGE["enumerated_above"][1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BatchingWarning)  # the users' version loops
        post = exact_posterior(model, *args)
    assert [s.name for s in post.sites] == ["x"] and post.num_states == 8
    states = post.states().float()
    log_joint = torch.stack([by_hand(x, *args) for x in states])
    assert torch.allclose(post.log_probs.float(), log_joint - log_joint.logsumexp(0), atol=1e-5)
    assert torch.allclose(post.log_normalizer.float(), log_joint.logsumexp(0), atol=1e-5)


#: every kernel that is exact on bits (DULA is not: it has no accept/reject step)
EXACT_KERNELS = sorted(set(pyro_gwg.REGISTRY) - {"DULA"})


@pytest.mark.parametrize("kernel", EXACT_KERNELS)
def test_every_kernel_samples_around_enumerated_sites_exactly(kernel):
    model, args = BRIDGE["enumerated_above_and_below"]
    pyro.set_rng_seed(0)
    codes = draw_codes(getattr(pyro_gwg, kernel)(model), 16, 600, 100, *args)
    assert_exact(codes, exact_posterior(model, *args))


def test_pyro_mcmc_samples_around_enumerated_sites_exactly():
    model, args = BRIDGE["enumerated_above_and_below"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(pyro_gwg.GWG(model), num_samples=1200, warmup_steps=100, disable_progbar=True)
    mcmc.run(*args)
    x = mcmc.get_samples(group_by_chain=True)["x"].long()
    assert_exact(x, exact_posterior(model, *args))


def test_vectorised_runner_samples_around_enumerated_sites_exactly():
    model, args = BRIDGE["enumerated_above_and_below"]
    pyro.set_rng_seed(0)
    mcmc = pyro_gwg.MCMC(
        pyro_gwg.GWG(model), num_samples=600, warmup_steps=100, num_chains=16, disable_progbar=True
    )
    mcmc.run(*args)
    x = mcmc.get_samples(group_by_chain=True)["x"].long()
    assert x.shape == (16, 600, 3)
    assert_exact(x, exact_posterior(model, *args))


def test_too_many_states_is_refused():
    def model():
        pyro.sample("x", dist.Bernoulli(0.5).expand([30]).to_event(1))

    with pytest.raises(ValueError, match="1.07e\\+09 joint states.*max_states"):
        exact_posterior(model)


@pytest.mark.parametrize(
    "chunk_size, error, message",
    [
        (0, ValueError, "chunk_size must be a positive integer.*got 0"),
        (-4, ValueError, "chunk_size must be a positive integer.*got -4"),
        (2.5, TypeError, "chunk_size must be an integer.*got 2.5"),
    ],
)
def test_chunk_size_is_checked_before_enumerating(chunk_size, error, message):
    with pytest.raises(error, match=message):
        exact_posterior(independent_bits, Y, chunk_size=chunk_size)


def test_unbounded_sites_need_a_window():
    model, args = SUITE["binomial_ordinal"]
    with pytest.raises(UnsupportedModelError, match="'n'.*unbounded.*bounds="):
        exact_posterior(model, *args)
    post = exact_posterior(model, *args, bounds=BOUNDS["binomial_ordinal"])
    assert post.num_states == 5 * 7 * 31
    with pytest.raises(ValueError, match="no ordinal latent site"):
        exact_posterior(model, *args, bounds={"k": (0, 1), "missing": (0, 1)})


# ---------------------------------------------------------------- memory


def wide(y):
    """One coordinate with 4096 values beside two bits: 16384 states, V = 4096."""
    k = pyro.sample("k", dist.Binomial(4095, 0.3))
    with pyro.plate("bits", 2):
        b = pyro.sample("b", dist.Bernoulli(0.5))
    pyro.sample("y", dist.Normal(k / 1000.0 + b.sum(-1, keepdim=True), 1.0), obs=y)


def test_marginals_of_a_wide_coordinate_fit_a_small_memory_budget():
    post = exact_posterior(wide, torch.tensor(2.5), max_bytes=2**26)  # 64 MiB
    probs = post.probs.reshape(4096, 2, 2)  # the last coordinate varies fastest
    marginals = post.flat_marginals()
    assert marginals.shape == (3, 4096)
    assert torch.allclose(marginals[0], probs.sum((1, 2)), atol=1e-12)
    assert torch.allclose(marginals[1, :2], probs.sum((0, 2)), atol=1e-12)
    assert torch.allclose(marginals[2, :2], probs.sum((0, 1)), atol=1e-12)
    assert (marginals[1:, 2:] == 0).all()
    # [D*V, D*V] = [12288, 12288] float64 is 1.2 GB: refused before it is allocated
    with pytest.raises(ValueError, match="pairwise marginal table \\[D\\*V, D\\*V\\] = \\[12288"):
        post.pairwise_marginals()
    draws = post.sample_codes(500)
    empirical = post.empirical_marginals(draws)
    assert empirical.shape == (3, 4096) and torch.allclose(
        empirical.sum(-1), torch.ones(3).double()
    )


@pytest.mark.slow
def test_marginals_use_little_memory_beyond_their_tables():
    import json
    import subprocess
    import sys

    code = """
import json, resource, torch, pyro, pyro.distributions as dist
import pyro_gwg
from pyro_gwg import exact_posterior
def wide(y):
    k = pyro.sample("k", dist.Binomial(4095, 0.3))
    with pyro.plate("bits", 2):
        b = pyro.sample("b", dist.Bernoulli(0.5))
    pyro.sample("y", dist.Normal(k / 1000.0 + b.sum(-1, keepdim=True), 1.0), obs=y)
torch.set_num_threads(1)
exact_posterior(wide, torch.tensor(2.5), chunk_size=64)  # warm up at a small size
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
post = exact_posterior(wide, torch.tensor(2.5))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"base": base, "after": after}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peaks = json.loads(out.stdout.strip().splitlines()[-1])
    # a dense one-hot block of 4096 states x 12288 (coordinate, value) columns would
    # take 400 MB (float64) on its own
    assert peaks["after"] - peaks["base"] < 150 * 1024  # KiB


def huge():
    pyro.sample("k", dist.Binomial(2**20 - 1, 0.5))
    pyro.sample("fixed", dist.Binomial(0, 0.5).expand([4096]).to_event(1))


def test_requests_that_cannot_fit_fail_before_enumerating(monkeypatch):
    import pyro_gwg.enumeration as enum

    def refuse(*args):
        raise AssertionError("enumerated before checking the memory")

    monkeypatch.setattr(enum, "_enumerate_log_joint", refuse)
    message = (
        "the exact posterior needs about 34.9 GB \\(marginal table \\[D, V\\] = "
        "\\[4097, 1048576\\]: 34.4 GB;.*more than max_bytes=1073741824.*the number of "
        "values V of the widest coordinate"
    )
    with pytest.raises(ValueError, match=message):
        exact_posterior(huge, max_bytes=2**30)
    with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
        exact_posterior(independent_bits, Y, max_bytes=-1)


def test_pairwise_marginals_by_scattering_and_by_one_hot_products_agree(monkeypatch):
    def counts(y):
        k = pyro.sample("k", dist.Binomial(20, 0.4))  # 21 values: scattered
        with pyro.plate("bits", 2):
            b = pyro.sample("b", dist.Bernoulli(torch.tensor([0.3, 0.6])))
        pyro.sample("y", dist.Normal(0.2 * k + b.sum(-1, keepdim=True), 1.0), obs=y)

    post = exact_posterior(counts, torch.tensor(3.0))
    scattered = post.pairwise_marginals()
    states, probs = post.states(), post.probs
    for i, j in [(0, 1), (1, 2), (0, 0)]:
        brute = torch.zeros(21, 21, dtype=torch.float64)
        brute.index_put_((states[:, i], states[:, j]), probs, accumulate=True)
        assert torch.allclose(scattered[i, j], brute, atol=1e-12)
    monkeypatch.setattr(type(post), "DENSE_WIDTH", 64)
    monkeypatch.setattr(type(post), "WORK_ELEMENTS", 1000)  # several blocks per chunk
    dense = exact_posterior(counts, torch.tensor(3.0)).pairwise_marginals()
    assert torch.allclose(dense, scattered, atol=1e-12)
    draws = post.sample_codes(300)
    empirical = post.empirical_marginals(draws, pairwise=True)
    assert torch.allclose(empirical[0, 0].diagonal(), post.empirical_marginals(draws)[0])


def test_lift_enumeration_lets_the_kernel_sample_marked_sites():
    @config_enumerate
    def model(y):
        c = pyro.sample("c", dist.Bernoulli(0.3))
        x = pyro.sample("x", dist.Bernoulli(0.6), infer={"enumerate": "parallel"})
        pyro.sample("y", dist.Normal(c + x, 1.0), obs=y)

    y = torch.tensor(1.4)
    with pytest.raises(UnsupportedModelError, match="no latent discrete sites"):
        ModelDensity(model, (y,))
    lifted = lift_enumeration(model)
    assert [s.name for s in ModelDensity(lifted, (y,)).sites] == ["c", "x"]
    post = exact_posterior(lifted, y)
    assert post.num_states == 4
    assert torch.allclose(
        post.log_normalizer, exact_posterior(model_without_marks, y).log_normalizer
    )


def model_without_marks(y):
    c = pyro.sample("c", dist.Bernoulli(0.3))
    x = pyro.sample("x", dist.Bernoulli(0.6))
    pyro.sample("y", dist.Normal(c + x, 1.0), obs=y)

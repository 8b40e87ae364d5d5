"""PAS and PAFS against the exact posterior of the small-model suite; the adaptation of
the path length in warmup; the kernels in pyro.infer.MCMC, the vectorised runner and the
estimators."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC
from small_models import BOUNDS, KIND_COVER, SUITE

import pyro_gwg
import pyro_gwg.proposals.path as path_math
from pyro_gwg import PAFS, PAS, exact_posterior
from pyro_gwg.adaptation import flips_bound
from pyro_gwg.contrib.estimators import ais, arm, ising_stages
from pyro_gwg.contrib.train import PCD, learnable_ising
from pyro_gwg.models import ising, lattice_couplings, lattice_ising, potts, random_potts

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")

# 64 batched chains of 750 draws: about the draws (and ESS) of 32 x 1500 in half the
# steps (a step of these tiny models costs little more for 64 chains than for 32)
NUM_CHAINS, NUM_SAMPLES, WARMUP = 64, 750, 100


def bits_and_categories(y):
    """Bits, a one-hot category and a categorical index in one model (the mixed layout
    of the site kinds PAS samples)."""
    b = pyro.sample("b", dist.Bernoulli(0.3).expand([2]).to_event(1))
    z = pyro.sample("z", dist.OneHotCategorical(logits=torch.tensor([0.0, 0.5, -0.5, 0.2])))
    c = pyro.sample("c", dist.Categorical(logits=torch.tensor([0.1, -0.3, 0.2])))
    mean = b.sum(-1) + z @ torch.tensor([-1.0, 0.0, 1.0, 2.0]) + 0.5 * c
    pyro.sample("y", dist.Normal(mean, 1.0), obs=y)


MODELS = dict(SUITE, bits_and_categories=(bits_and_categories, (torch.tensor(2.5),)))


def _exact(name):
    model, args = MODELS[name]
    return exact_posterior(model, *args, bounds=BOUNDS.get(name))


def _draws(kernel_class, name, seed=0, **settings):
    model, args = MODELS[name]
    pyro.set_rng_seed(seed)
    return draw_codes(kernel_class(model, **settings), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)


# the adapted path length on every model; a fixed one on the models that cover the
# site kinds
@pytest.mark.parametrize(
    "name,num_flips",
    [(name, "auto") for name in sorted(MODELS)] + [(n, 2) for n in KIND_COVER if n in MODELS],
)
def test_pas_matches_exact_posterior(name, num_flips):
    assert_exact(_draws(PAS, name, num_flips=num_flips), _exact(name))


@pytest.mark.parametrize(
    "name,num_flips",
    [(name, "auto") for name in sorted(MODELS)] + [(n, 2) for n in KIND_COVER if n in MODELS],
)
def test_pafs_matches_exact_posterior(name, num_flips):
    assert_exact(_draws(PAFS, name, num_flips=num_flips), _exact(name))


def test_exactness_check_fails_for_pas_with_the_reverse_path_under_a_wrong_gradient(
    monkeypatch,
):
    # the reverse path scored under a zero gradient (uniform moves) instead of the
    # gradient at the proposed state: the ratio is wrong and the check must notice
    score = path_math.path_log_prob
    monkeypatch.setattr(
        path_math,
        "path_log_prob",
        lambda states, moves, active, grad, *args: score(
            states, moves, active, torch.zeros_like(grad), *args
        ),
    )
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(
            _draws(PAS, "coupled_binary_field", num_flips=3), _exact("coupled_binary_field")
        )


def test_exactness_check_fails_for_pafs_without_the_normalisers(monkeypatch):
    # scoring a path drawn without replacement as if drawn with replacement
    monkeypatch.setattr(
        path_math,
        "without_replacement_log_prob",
        lambda log_q, *a, **k: log_q.new_zeros(len(log_q)),
    )
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(
            _draws(PAFS, "coupled_binary_field", num_flips=3), _exact("coupled_binary_field")
        )


# pyro.infer.MCMC's plumbing is the same for both (_PathKernel): PAS's run under -m heavy
@pytest.mark.parametrize("kernel_class", [pytest.param(PAS, marks=pytest.mark.heavy), PAFS])
def test_in_pyro_mcmc_matches_exact_posterior(kernel_class):
    model, args = MODELS["one_hot_mixture"]
    pyro.set_rng_seed(1)
    mcmc = MCMC(
        kernel_class(model, num_flips=2, jit_compile=True),
        num_samples=1500,
        warmup_steps=100,
        num_chains=2,
        disable_progbar=True,
    )
    mcmc.run(*args)
    z = mcmc.get_samples(group_by_chain=True)["z"].argmax(-1)
    assert_exact(z, _exact("one_hot_mixture"))
    assert 0 < mcmc.diagnostics()["acceptance rate"]["chain 0"] < 1


@pytest.mark.parametrize("kernel_class", [PAS, PAFS])
def test_in_the_vectorised_runner_matches_exact_posterior(kernel_class):
    model, args = MODELS["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = pyro_gwg.MCMC(
        kernel_class(model, num_flips="auto"),
        num_samples=1500,
        warmup_steps=200,
        num_chains=16,
        disable_progbar=True,
    )
    mcmc.run(*args)
    x = mcmc.get_samples(group_by_chain=True)["x"].long()
    assert x.shape == (16, 1500, 5)
    assert_exact(x, _exact("coupled_binary_field"))


# ---------------------------------------------------------------- the path length


def _adapted(kernel_class, coupling, **settings):
    pyro.set_rng_seed(0)
    kernel = kernel_class(lattice_ising, num_flips="auto", **settings)
    mcmc = pyro_gwg.MCMC(
        kernel, num_samples=100, warmup_steps=300, num_chains=16, disable_progbar=True
    )
    mcmc.run(size=8, coupling=coupling)
    return kernel, mcmc


# the adaptation is _PathKernel's, shared by PAS and PAFS: PAS's (a 100 s run) under
# -m heavy
@pytest.mark.slow
@pytest.mark.parametrize("kernel_class", [pytest.param(PAS, marks=pytest.mark.heavy), PAFS])
def test_the_path_length_adapts_to_the_target_and_is_fixed_after_warmup(kernel_class):
    weak, weak_run = _adapted(kernel_class, 0.1)
    strong, strong_run = _adapted(kernel_class, 0.4)
    # a weaker coupling takes longer paths, at about the target acceptance
    assert weak.adapted_num_flips > strong.adapted_num_flips >= 1
    for run in (weak_run, strong_run):
        rate = sum(run.diagnostics()["acceptance rate"].values()) / 16
        assert abs(rate - 0.574) < 0.15, rate
    cautious, _ = _adapted(kernel_class, 0.1, target_accept_prob=0.9)
    assert cautious.adapted_num_flips < weak.adapted_num_flips


@pytest.mark.parametrize("kernel_class", [PAS, PAFS])
def test_the_path_length_is_a_run_time_value_fixed_after_warmup(kernel_class):
    pyro.set_rng_seed(0)
    kernel = kernel_class(lattice_ising, num_flips=1, adapt_num_flips=True)
    kernel.vectorized_chains = 4
    kernel.setup(30, size=4, coupling=0.1)
    driver = kernel.driver
    driver.run(30, every=8)
    adapted = kernel.adapted_num_flips
    assert adapted > 1
    # one step function served every value in warmup
    assert len([key for key in driver._compiled if key[0] == "step"]) <= 1
    # after warmup: the adapted length, and a step built for a bound of it
    driver.run(16, every=8)
    assert torch.equal(driver.state.num_flips, torch.full((4,), adapted))
    assert driver.static == {"max_flips": flips_bound(adapted, 16)}
    assert kernel.current_num_flips == adapted


# ---------------------------------------------------------------- the estimators


@pytest.mark.parametrize("kernel", [PAS(num_flips=2), PAFS(num_flips=2)], ids=["PAS", "PAFS"])
def test_ais_matches_enumeration(kernel):
    pyro.set_rng_seed(0)
    couplings = lattice_couplings(3, 0.3)
    exact = float(exact_posterior(ising, couplings).log_normalizer)
    result = ais(ising, kernel, num_particles=200, num_steps=200, model_args=(couplings,))
    err, se = float(result.log_z) - exact, float(result.log_z_se)
    assert 0 < se < 0.1 and abs(err) < 4 * se, (err, se)


def test_ais_with_pas_on_a_potts_model_matches_enumeration():
    pyro.set_rng_seed(0)
    params = random_potts(4, 3, coupling_scale=0.5, seed=1)
    exact = float(exact_posterior(potts, *params).log_normalizer)
    result = ais(
        potts, PAS(num_flips=2), num_particles=200, num_steps=100, model_args=tuple(params)
    )
    err, se = float(result.log_z) - exact, float(result.log_z_se)
    assert 0 < se < 0.1 and abs(err) < 4 * se, (err, se)


def test_arm_with_pafs_matches_enumeration():
    pyro.set_rng_seed(1)
    couplings = lattice_couplings(3, 0.3)
    exact = float(exact_posterior(ising, couplings).log_normalizer)
    result = arm(ising_stages(couplings), PAFS(num_flips=2), num_particles=100, num_runs=8)
    err, se = float(result.log_z) - exact, float(result.log_z_se)
    assert 0 < se < 0.1 and abs(err) < 4 * se, (err, se)


def test_pcd_trains_with_pas():
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    data = exact_posterior(ising, lattice_couplings(2, 0.3)).sample(64)
    pcd = PCD(
        learnable_ising, PAS(num_flips=2), num_chains=16, mcmc_steps=2, lr=0.01, model_args=(4,)
    )
    history = pcd.fit(data, num_iterations=3, batch_size=16)
    assert len(history) == 3 and pcd.chains.shape == (16, 4)
    pyro.clear_param_store()


# ---------------------------------------------------------------- arguments


def test_bad_arguments_are_refused():
    model, args = MODELS["coupled_binary_field"]
    for kernel_class in (PAS, PAFS):
        for bad in (0, 1.5, "many"):
            with pytest.raises(ValueError, match="num_flips"):
                kernel_class(model, num_flips=bad)
        with pytest.raises(ValueError, match="uniform_weight"):
            kernel_class(model, uniform_weight=1.0)
    # a path without replacement cannot be longer than the model has coordinates
    with pytest.raises(ValueError, match=r"PAFS\(num_flips=6\).*\(5\).*<= 5"):
        MCMC(PAFS(model, num_flips=6), num_samples=2, disable_progbar=True).run(*args)
    # with replacement it can
    MCMC(PAS(model, num_flips=6), num_samples=2, disable_progbar=True).run(*args)


@pytest.mark.parametrize("kernel_class", [PAS, PAFS])
@pytest.mark.parametrize("option", [{"balancing": "barker"}, {"replacement": False}, {"radius": 2}])
def test_options_of_gwgs_own_move_are_refused_not_ignored(kernel_class, option):
    ((name, value),) = option.items()
    with pytest.raises(
        ValueError, match=r"{} takes no {}=.*Use GWG\({}=".format(kernel_class.__name__, name, name)
    ):
        kernel_class(num_flips=2, **option)
    kernel_class(num_flips=2, balancing="sqrt")  # the path's own balancing

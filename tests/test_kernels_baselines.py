"""Gibbs, Hamming-ball and locally balanced kernels against the exact posterior of the
small-model suite; their pure helpers; cost accounting of every kernel."""

import math
import pickle

import pyro
import pytest
import torch
from capture import assert_default_capture
from exactness import assert_exact, draw_codes
from pyro.infer import MCMC
from small_models import BOUNDS, KIND_COVER, SUITE

import pyro_gwg.proposals.gibbs as gibbs_math
import pyro_gwg.proposals.locally_balanced as lb_math
from pyro_gwg import AVG, GWG, NCG, PAVG, Gibbs, HammingBall, LocallyBalanced, exact_posterior
from pyro_gwg.models import (
    binary_ebm,
    erdos_renyi_couplings,
    factorial_hmm,
    ising,
    lattice_ising,
    lattice_potts,
    mlp_energy,
    potts,
    random_fhmm,
    random_potts,
    random_rbm,
    rbm,
)
from pyro_gwg.proposals.blocks import ball_shifts, shift_values, value_windows, window_width

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")

# 64 batched chains of 750 draws: about the draws (and ESS) of 32 x 1500 in half the
# steps (a step of these tiny models costs little more for 64 chains than for 32)
NUM_CHAINS, NUM_SAMPLES, WARMUP = 64, 750, 100

#: LocallyBalanced with balancing functions other than its default square root
BALANCING_VARIANTS = {
    "locally-balanced-" + g: lambda model, g=g: LocallyBalanced(
        model, balancing=g, jit_compile=True
    )
    for g in ("barker", "min", "max")
}
KERNELS = {
    "gibbs-random": lambda model: Gibbs(model, jit_compile=True),
    "gibbs-systematic": lambda model: Gibbs(model, scan="systematic", jit_compile=True),
    "hamming-ball-3-1": lambda model: HammingBall(model, block_size=3, jit_compile=True),
    "locally-balanced": lambda model: LocallyBalanced(model, jit_compile=True),
    **BALANCING_VARIANTS,
}


def _exact(name):
    model, args = SUITE[name]
    return exact_posterior(model, *args, bounds=BOUNDS.get(name))


# each kernel's default settings on every model; LocallyBalanced's other balancing
# functions on the models that cover the site kinds: on mixed_kinds (one site of every
# kind, in the mixed layout) in CI, on the one-kind models too under -m heavy
@pytest.mark.parametrize(
    "name,kernel",
    [(n, k) for k in sorted(KERNELS) for n in sorted(SUITE) if k not in BALANCING_VARIANTS]
    + [
        pytest.param(n, k, marks=() if n == "mixed_kinds" else pytest.mark.heavy)
        for k in BALANCING_VARIANTS
        for n in KIND_COVER
    ],
)
def test_baseline_matches_exact_posterior(name, kernel):
    model, args = SUITE[name]
    pyro.set_rng_seed(0)
    codes = draw_codes(KERNELS[kernel](model), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)
    assert_exact(codes, _exact(name))


def test_hamming_ball_with_fixed_blocks_matches_exact_posterior():
    model, args = SUITE["nested_plates"]  # a 2 x 3 grid of bits: one block per row
    pyro.set_rng_seed(0)
    kernel = HammingBall(model, blocks=[[0, 1, 2], [3, 4, 5]], radius=2, jit_compile=True)
    codes = draw_codes(kernel, NUM_CHAINS, NUM_SAMPLES, WARMUP, *args)
    assert_exact(codes, _exact("nested_plates"))
    assert kernel.diagnostics()["energy_evals"].eq(7).all()  # 1 + 3 single + 3 double flips


def test_gibbs_in_pyro_mcmc_matches_exact_posterior():
    model, args = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(1)
    mcmc = MCMC(Gibbs(model), num_samples=2000, warmup_steps=100, disable_progbar=True)
    mcmc.run(*args)
    x = mcmc.get_samples(group_by_chain=True)["x"].long()
    assert_exact(x, _exact("coupled_binary_field"))


# ------------------------------------------------- the check fails for broken samplers


def test_exactness_check_fails_for_a_state_dependent_gibbs_window(monkeypatch):
    # a window centred on the current value makes the conditional's support depend on
    # the state: not a Gibbs update any more, and not exact. The check must notice.
    def centred(values, lower, upper, window):
        low = torch.maximum((values - 1).to(lower.dtype), lower)
        high = torch.minimum((values + 1).to(lower.dtype), upper)
        return low.long(), (high - low + 1).long()

    monkeypatch.setattr(gibbs_math, "value_windows", centred)
    model, args = SUITE["binomial_ordinal"]
    pyro.set_rng_seed(0)
    codes = draw_codes(
        Gibbs(model, window=3, jit_compile=True), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args
    )
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, _exact("binomial_ordinal"))


def test_exactness_check_fails_without_the_reverse_proposal(monkeypatch):
    model, args = SUITE["coupled_binary_field"]
    monkeypatch.setattr(lb_math, "move_log_prob", lambda log_q, *a: log_q.new_zeros(log_q.shape[0]))
    pyro.set_rng_seed(0)
    codes = draw_codes(
        LocallyBalanced(model, jit_compile=True), NUM_CHAINS, NUM_SAMPLES, WARMUP, *args
    )
    with pytest.raises(AssertionError, match="disagree with the exact posterior"):
        assert_exact(codes, _exact("coupled_binary_field"))


# ------------------------------------------------------------------ pure helpers


def test_ball_shifts_enumerate_the_hamming_ball():
    shifts = ball_shifts(10, 1, 2)
    assert shifts.shape == (11, 10) and shifts[0].eq(0).all()
    assert (shifts != 0).sum(-1).le(1).all() and len({tuple(r) for r in shifts.tolist()}) == 11
    shifts = ball_shifts(4, 2, 3)
    assert shifts.shape[0] == 1 + 4 * 2 + math.comb(4, 2) * 4
    assert (shifts != 0).sum(-1).le(2).all() and shifts.max() == 2
    with pytest.raises(ValueError, match="Hamming ball"):
        ball_shifts(30, 5, 2)


def test_value_windows_hold_the_value_and_tile_the_integers():
    torch.manual_seed(0)
    values = torch.randint(0, 40, (500, 3))
    lower = torch.tensor([0.0, -float("inf"), 2.0])
    upper = torch.tensor([float("inf"), float("inf"), 5.0])
    values[:, 2] = values[:, 2] % 4 + 2
    low, size = value_windows(values, lower, upper, 6)
    assert ((low <= values) & (values < low + size)).all()
    assert size[:, 1].eq(6).all() and size[:, 2].eq(4).all() and low[:, 2].eq(2).all()
    assert size[:, 0].le(6).all() and low[:, 0].ge(0).all()
    # the unbounded windows start on the grid offset + 6k, for a uniform offset
    assert len(set((low[:, 1] % 6).tolist())) == 6
    assert window_width(lower, upper, 6) == 6 and window_width(lower[2:], upper[2:], 6) == 4


def test_cyclic_shifts_are_undone_by_the_negated_shift():
    shifts = ball_shifts(3, 2, 4)
    values = torch.tensor([[0, 3, 1]])
    low, size = torch.tensor([[0, 0, 0]]), torch.tensor([[2, 4, 3]])
    shifted, valid = shift_values(values, low, size, shifts)
    assert valid.sum() == 1 + (1 + 3 + 2) + (1 * 3 + 1 * 2 + 3 * 2)
    for row in shifted[0][valid[0]]:
        back, ok = shift_values(row.unsqueeze(0), low, size, shifts)
        assert (back[0][ok[0]] == values[0]).all(-1).any()


# ------------------------------------------------------------------ cost accounting


@pytest.mark.parametrize(
    "make, energy_evals, grad_evals",
    [
        (lambda m: GWG(m), 1, 1),
        (lambda m: Gibbs(m), 1, 0),
        (lambda m: HammingBall(m, block_size=10, radius=1), 11, 0),
        (lambda m: LocallyBalanced(m), 16, 0),
        (lambda m: NCG(m), 1, 1),
        (lambda m: AVG(m), 1, 1),
        (lambda m: PAVG(m), 1, 1),
    ],
)
def test_every_kernel_counts_its_evaluations(make, energy_evals, grad_evals):
    pyro.set_rng_seed(0)
    mcmc = MCMC(make(lattice_ising), num_samples=5, warmup_steps=2, disable_progbar=True)
    mcmc.run(size=4, coupling=0.3)
    diag = mcmc.diagnostics()
    assert diag["energy_evals"]["chain 0"].eq(energy_evals).all()
    assert diag["grad_evals"]["chain 0"].eq(grad_evals).all()
    assert diag["energy_evals"]["chain 0"].shape == (5,)


def test_gibbs_cost_is_the_widest_window_less_one():
    model, args = SUITE["mixed_kinds"]  # widest: the 4-way one-hot site
    kernel = Gibbs(model)
    draw_codes(kernel, 2, 3, 0, *args)
    assert kernel.diagnostics()["energy_evals"].eq(3).all()


# ------------------------------------------------------------------ plumbing


@pytest.mark.parametrize("make", [Gibbs, HammingBall, LocallyBalanced])
def test_baselines_pickle_summarise_and_reproduce(make, capsys):
    model, args = SUITE["mixed_kinds"]
    kernel = make(model)
    kernel.setup(2, *args)
    clone = pickle.loads(pickle.dumps(kernel))
    assert clone.energy is None and clone.chunk_size == kernel.chunk_size
    runs = []
    for _ in range(2):
        pyro.set_rng_seed(3)
        mcmc = MCMC(make(model), num_samples=20, warmup_steps=5, disable_progbar=True)
        mcmc.run(*args)
        runs.append(mcmc.get_samples())
    for name in runs[0]:
        assert torch.equal(runs[0][name], runs[1][name])
    mcmc.summary()
    assert "Number of divergences: 0" in capsys.readouterr().out


def test_small_chunks_give_the_same_chain():
    model, args = SUITE["coupled_binary_field"]
    runs = []
    for chunk_size in (1, 4096):
        pyro.set_rng_seed(0)
        runs.append(draw_codes(LocallyBalanced(model, chunk_size=chunk_size), 3, 20, 0, *args))
    assert torch.equal(runs[0], runs[1])


def test_bad_arguments_are_refused():
    model, args = SUITE["coupled_binary_field"]
    with pytest.raises(ValueError, match="scan"):
        Gibbs(model, scan="sideways")
    with pytest.raises(ValueError, match="window"):
        Gibbs(model, window=0)
    with pytest.raises(ValueError, match="radius"):
        HammingBall(model, radius=0)
    with pytest.raises(ValueError, match="chunk_size"):
        LocallyBalanced(model, chunk_size=0)
    with pytest.raises(ValueError, match="temperature"):
        LocallyBalanced(model, temperature=-1.0)
    with pytest.raises(ValueError, match="balancing must be one of"):
        LocallyBalanced(model, balancing="cube")
    with pytest.raises(ValueError, match=r"LocallyBalanced\(balancing='min', temperature=2"):
        LocallyBalanced(model, balancing="min", temperature=2.0)
    with pytest.raises(ValueError, match="outside"):
        HammingBall(model, blocks=[[0, 9]]).setup(0, *args)
    with pytest.raises(ValueError, match="distinct"):
        HammingBall(model, blocks=[[1, 1]]).setup(0, *args)


# ------------------------------------------------------- every model, every kernel

MODELS = {
    "ising": (ising, (erdos_renyi_couplings(12, seed=0),)),
    "lattice_potts": (lattice_potts, (3, 3, 0.5)),
    "potts": (potts, tuple(random_potts(num_sites=5, num_states=3, seed=0))),
    "rbm": (rbm, tuple(random_rbm(10, 4, seed=0))),
    "fhmm": (factorial_hmm, (lambda d: (d.y, *d.params))(random_fhmm(6, 3, seed=0))),
    "ebm": (binary_ebm, (mlp_energy(8, seed=0), 8)),
}
ALL_KERNELS = {
    "gwg": GWG,
    "gwg-3": lambda model: GWG(model, num_flips=3),
    "gibbs": Gibbs,
    "hb-4-2": lambda model: HammingBall(model, block_size=4, radius=2),
    "lb": LocallyBalanced,
}


@pytest.mark.parametrize("kernel", ["gwg", "gibbs"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_default_transition_of_every_model_is_captured(name, kernel, caplog):
    # (see capture.assert_default_capture)
    model, args = MODELS[name]
    pyro.set_rng_seed(0)
    assert_default_capture(ALL_KERNELS[kernel](model), caplog, *args)


@pytest.mark.parametrize("kernel", sorted(ALL_KERNELS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_runs_with_every_kernel(name, kernel):
    model, args = MODELS[name]
    pyro.set_rng_seed(0)
    sampler = ALL_KERNELS[kernel](model)
    codes = draw_codes(sampler, 3, 15, 0, *args)
    log_joint = sampler.energy.log_joint(codes[:, -1])
    assert torch.isfinite(log_joint).all()
    assert torch.allclose(log_joint, sampler.state.log_joint, atol=1e-4)
    assert (codes != codes[:, :1]).any()  # the chains moved

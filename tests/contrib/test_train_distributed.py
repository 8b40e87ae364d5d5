"""Data-parallel PCD on torch.distributed (gloo, spawned processes on this machine): the
all-reduced update equals the one-process update on the union of the ranks' batches and
chains; a 2-worker fit learns the couplings of a 1-worker fit within Monte Carlo error;
a failing worker stops the others and is reported; arguments are checked before any
process starts.

Each launch spawns fresh interpreters that import torch and Pyro; with two launches the
module takes 27 s on 2 cores (55 s while other jobs kept them busy)."""

import functools
import os
import signal

import pyro
import pytest
import torch
import torch.distributed as dist

import pyro_gwg
from pyro_gwg import GWG, PAVG, exact_posterior
from pyro_gwg.adaptation import fit_records
from pyro_gwg.cluster import block_seeds
from pyro_gwg.contrib.train import (
    PCD,
    coupling_rmse,
    fit_data_parallel,
    learnable_ising,
    run_data_parallel,
    symmetric_couplings,
)
from pyro_gwg.models import ising, lattice_couplings

PACKAGE_DIR = os.path.dirname(pyro_gwg.__file__)


@pytest.fixture(autouse=True)
def _fresh_params():
    """A clean parameter store for every test."""
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


# ---------------------------------------------------------------------- the plumbing, exactly


def _plumbing_pcd() -> PCD:
    # no chain moves (mcmc_steps=0) and plain SGD with lr=1 warmed up over 2 updates: the
    # update is minus half the gradient; with every deep-EBM option that touches it
    return PCD(
        learnable_ising,
        GWG(),
        num_chains=8,
        mcmc_steps=0,
        optimizer=torch.optim.SGD,
        lr=1.0,
        penalty={"couplings": 0.1},
        energy_reg=0.2,
        ema=0.5,
        warmup_iterations=2,
        init="data_mean",
        model_args=(4,),
    )


def _flat_params() -> torch.Tensor:
    return torch.cat([pyro.param(name).detach().reshape(-1) for name in ("couplings", "bias")])


def _one_update_worker(chains: torch.Tensor, batch: torch.Tensor) -> dict:
    """Each rank starts from its own random parameters, is given its share of the chains
    and of the batch, and takes one update; then the argument checks that need a group."""
    pyro.param("couplings", torch.randn(4, 4))  # rank-dependent: the seeds differ
    pyro.param("bias", torch.randn(4))
    pcd = _plumbing_pcd()
    before = [torch.empty(20) for _ in range(dist.get_world_size())]
    dist.all_gather(before, _flat_params())
    pcd.distribute()
    rank, world_size = pcd.rank, pcd.world_size
    start = {name: pyro.param(name).detach().clone() for name in pcd.param_names}
    share = len(chains) // world_size, len(batch) // world_size
    pcd.chains = chains[rank * share[0] : (rank + 1) * share[0]].clone()
    record = pcd.step(batch[rank * share[1] : (rank + 1) * share[1]])
    averages = torch.cat([value.reshape(-1) for value in pcd.ema_params().values()])
    all_averages = [torch.empty(20) for _ in range(world_size)]
    dist.all_gather(all_averages, averages)
    errors = {}
    for name, call in (
        ("after first step", pcd.distribute),
        ("odd batch", lambda: pcd.fit(batch, num_iterations=1, batch_size=3)),
    ):
        try:
            call()
        except (RuntimeError, ValueError) as error:
            errors[name] = str(error)
    synchronised = pcd.parameters_synchronised()
    torch.manual_seed(0)  # every rank alike: distribute refuses
    try:
        _plumbing_pcd().distribute()
    except RuntimeError as error:
        errors["shared seed"] = str(error)
    return {
        "ranks started apart": not torch.equal(before[0], before[1]),
        "start": start,
        "end": {name: pyro.param(name).detach().clone() for name in pcd.param_names},
        "record": record,
        "ema": pcd.ema_params(),
        "ema synchronised": torch.equal(all_averages[0], all_averages[1]),
        "init distribution": pcd.init_distribution.log_probs,
        "synchronised": synchronised,
        "errors": errors,
    }


def test_all_reduced_update_equals_the_one_process_update():
    generator = torch.Generator().manual_seed(0)
    chains = torch.randint(0, 2, (8, 4), generator=generator)
    batch = torch.randint(0, 2, (6, 4), generator=generator)
    out = run_data_parallel(_one_update_worker, (chains, batch), num_workers=2, seed=3)
    assert out["ranks started apart"] and out["synchronised"] and out["ema synchronised"]
    # one process, from rank 0's parameters (broadcast to rank 1), on all chains and data
    for name, value in out["start"].items():
        pyro.param(name, value.clone())
    pcd = _plumbing_pcd()
    pcd.chains = chains.clone()
    record = pcd.step(batch)
    for name in pcd.param_names:
        assert not torch.equal(out["end"][name], out["start"][name])
        # equal up to float32 rounding (the sums are taken in another order)
        torch.testing.assert_close(out["end"][name], pyro.param(name).detach(), rtol=0, atol=1e-6)
    for key in ("loss", "penalty", "energy_reg", "lr"):
        assert out["record"][key] == pytest.approx(record[key], abs=1e-6)
    assert record["energy_reg"] > 0 and record["lr"] == 0.5
    # the moving averages restart from the broadcast parameters on every rank, and the
    # data-mean distribution is fitted to the union of the ranks' first batches
    for name, value in pcd.ema_params().items():
        torch.testing.assert_close(out["ema"][name], value, rtol=0, atol=1e-6)
    assert torch.equal(out["init distribution"], pcd.init_distribution.log_probs)
    errors = out["errors"]
    assert "before the first step" in errors["after first step"]
    assert "batch_size (3) must be divisible by the number of workers (2)" in errors["odd batch"]
    assert "share torch's seed" in errors["shared seed"]


def _chains_preconditioner_worker(package_dir: str) -> dict:
    """Each rank moves its own chains under PAVG with the preconditioner fitted to the
    chains; the fit pools every rank's records, so the ranks share one matrix."""
    assert os.path.dirname(pyro_gwg.__file__) == package_dir, pyro_gwg.__file__
    pyro.param("couplings", lattice_couplings(3, 0.3))  # away from J = 0, where M = 0 fits
    pcd = PCD(
        learnable_ising,
        PAVG(step_size=0.5, adapt_step_size=False, jit_compile=False),
        num_chains=32,
        mcmc_steps=2,
        lr=0.02,
        preconditioner="chains",
        model_args=(9,),
    ).distribute()
    pcd.fit(torch.randint(0, 2, (64, 9)).float(), num_iterations=3, batch_size=16)
    mine = pcd.preconditioner_matrix
    matrices = [torch.empty(9, 9) for _ in range(pcd.world_size)]
    dist.all_gather(matrices, mine)
    # the last refit (before update 2) on this rank's records of updates 0 and 1 only
    own = fit_records(list(pcd._records)[:-1]).matrix
    return {"matrices": matrices, "own differs": not torch.allclose(own, mine)}


def test_ranks_share_the_preconditioner_fitted_to_their_chains():
    out = run_data_parallel(_chains_preconditioner_worker, (PACKAGE_DIR,), num_workers=2)
    first, second = out["matrices"]
    assert first.abs().sum() > 0 and torch.equal(first, second)
    assert out["own differs"]


# ---------------------------------------------------------------------- learning, within MC error

NUM_ITERATIONS, BATCH_SIZE = 100, 64


def _make_ising_pcd(package_dir: str, num_chains: int = 64, buffer_size=None) -> PCD:
    # runs in the workers: they must import this checkout, as the test process does
    assert os.path.dirname(pyro_gwg.__file__) == package_dir, pyro_gwg.__file__
    return PCD(
        learnable_ising,
        GWG(),
        num_chains=num_chains,
        mcmc_steps=5,
        lr=0.02,
        buffer_size=buffer_size,
        model_args=(9,),
    )


def _upper(couplings: torch.Tensor) -> torch.Tensor:
    rows, cols = torch.triu_indices(9, 9, 1)
    return symmetric_couplings(couplings).detach()[rows, cols]


def test_two_workers_learn_the_couplings_of_one_within_monte_carlo_error():
    import scipy.stats  # here, not at the top: every worker imports this module

    torch.manual_seed(0)
    true = lattice_couplings(3, 0.25)
    data = exact_posterior(ising, true).sample(2000)
    make_pcd = functools.partial(_make_ising_pcd, PACKAGE_DIR)
    two = fit_data_parallel(
        make_pcd, data, num_workers=2, num_iterations=NUM_ITERATIONS, batch_size=BATCH_SIZE, seed=10
    )
    assert len(two.history) == NUM_ITERATIONS

    # the reference: 1-worker fits, in this process (what fit_data_parallel does with one
    # worker, without the start-up), seeded as its rank 0 would be for seeds 0..3
    # (independent of the 2-worker fit's seed 10)
    reference = []
    for seed in range(4):
        pyro.clear_param_store()
        torch.manual_seed(block_seeds(seed, 1)[0])
        make_pcd().fit(data, NUM_ITERATIONS, BATCH_SIZE)
        reference.append(_upper(pyro.param("couplings")))

    # The fits differ by Monte Carlo noise only (same data; the union of the 2 workers'
    # chains and batches has the law of one worker's). The per-coupling standard
    # deviation across reference seeds is pooled over the 36 couplings (bonds and
    # non-bonds spread alike here, sd about 0.03 each), and the 2-worker fit's deviation
    # from the reference mean, sd * sqrt(1 + 1/n), is tested coupling by coupling at a
    # family-wise level of 1e-3 (Bonferroni, valid however the couplings correlate).
    reference = torch.stack(reference)
    n = reference.shape[0]
    sd = reference.var(0).mean().sqrt()
    z = (_upper(two.params["couplings"]) - reference.mean(0)) / (sd * (1 + 1 / n) ** 0.5)
    bound = scipy.stats.t.ppf(1 - 1e-3 / (2 * z.numel()), df=z.numel() * (n - 1))
    assert float(z.abs().max()) < bound, "max |z| {:.2f}, bound {:.2f}".format(
        float(z.abs().max()), bound
    )
    # and the comparison is not between two fits that learned nothing
    learned = symmetric_couplings(two.params["couplings"])
    assert coupling_rmse(learned, true) < 0.5 * coupling_rmse(torch.zeros_like(true), true)


# ---------------------------------------------------------------------- failing workers


class _NeedsItsArgument(Exception):
    """An exception whose instances pickle but do not unpickle (a required keyword)."""

    def __init__(self, *, detail: str) -> None:
        super().__init__("the worker's own error: " + detail)


def _fail_on_one_rank(how: str):
    """Rank 1 fails while rank 0 waits for it in a collective that never completes."""
    if dist.get_rank() == 1:
        if how == "raise":
            raise ValueError("rank 1 cannot go on")
        if how == "unpicklable":
            raise _NeedsItsArgument(detail="rank 1")
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(1))


@pytest.mark.parametrize("how", ["raise", "unpicklable", "killed"])
def test_a_failing_worker_stops_the_others_and_is_reported(how):
    # the error is raised here with its own type and the worker's traceback as its
    # cause; a worker killed by a signal is reported by its exit code; either way rank
    # 0, blocked in a collective, is stopped instead of waiting for its peer forever
    if how == "raise":
        with pytest.raises(ValueError, match="rank 1 cannot go on") as info:
            run_data_parallel(_fail_on_one_rank, (how,), num_workers=2)
        assert "in data-parallel worker 1" in str(info.value.__cause__)
        assert "_fail_on_one_rank" in str(info.value.__cause__)
    elif how == "unpicklable":
        with pytest.raises(RuntimeError, match="_NeedsItsArgument: the worker's own error"):
            run_data_parallel(_fail_on_one_rank, (how,), num_workers=2)
    else:
        with pytest.raises(RuntimeError, match="worker 1 ended with exit code -9"):
            run_data_parallel(_fail_on_one_rank, (how,), num_workers=2)


# ---------------------------------------------------------------------- argument checks


def _not_a_pcd():
    return object()


def test_arguments_are_checked_before_any_worker_starts():
    data = torch.ones(10, 9)
    make_pcd = functools.partial(_make_ising_pcd, PACKAGE_DIR)
    fit = functools.partial(fit_data_parallel, data=data, num_iterations=1, batch_size=4)
    with pytest.raises(ValueError, match="num_workers must be a positive integer"):
        fit(make_pcd, num_workers=0)
    with pytest.raises(TypeError, match="num_workers must be an integer"):
        fit(make_pcd, num_workers=1.5)
    with pytest.raises(ValueError, match="num_iterations must be a positive integer"):
        fit(make_pcd, num_workers=2, num_iterations=0)
    with pytest.raises(ValueError, match=r"batch_size \(5\) must be divisible by num_workers"):
        fit(make_pcd, num_workers=2, batch_size=5)
    with pytest.raises(TypeError, match="make_pcd must be picklable"):
        fit(lambda: _make_ising_pcd(PACKAGE_DIR), num_workers=2)
    with pytest.raises(TypeError, match="make_pcd must return a PCD"):
        fit(_not_a_pcd, num_workers=2)
    # checked in a scope of the parameter store: this process's store is left alone
    pyro.param("unrelated", torch.ones(1))
    with pytest.raises(ValueError, match=r"num_chains \(63\) must be divisible"):
        fit(functools.partial(make_pcd, num_chains=63), num_workers=2)
    with pytest.raises(ValueError, match=r"buffer_size \(129\) must be divisible"):
        fit(functools.partial(make_pcd, buffer_size=129), num_workers=2)
    with pytest.raises(ValueError, match="has shape"):
        fit_data_parallel(make_pcd, torch.ones(10, 4), num_workers=2, num_iterations=1)
    assert list(pyro.get_param_store().keys()) == ["unrelated"]
    with pytest.raises(TypeError, match="fn must be picklable"):
        run_data_parallel(lambda: None, num_workers=1)
    with pytest.raises(RuntimeError, match="initialised torch.distributed"):
        make_pcd().distribute()

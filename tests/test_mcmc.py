"""The batched-chain runner ``pyro_gwg.MCMC``."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from exactness import assert_exact
from pyro.infer import HMC
from small_models import BOUNDS, SUITE

import pyro_gwg
from pyro_gwg import GWG, MCMC, MixedGibbs, exact_posterior
from pyro_gwg.driver import ChainDriver

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def codes_of(mcmc, name):
    """Draws of a run as codes ``[C, T, D]`` (for comparison with the exact posterior)."""
    model, args = SUITE[name]
    post = exact_posterior(model, *args, bounds=BOUNDS.get(name))
    samples = mcmc.get_samples(group_by_chain=True)
    chains, draws = next(iter(samples.values())).shape[:2]
    flat = {k: v.reshape((chains * draws,) + v.shape[2:]) for k, v in samples.items()}
    return post.energy.codes_from_values(flat).reshape(chains, draws, -1), post


@pytest.mark.parametrize("name", ["mixed_kinds", "enumerated_switch", "nested_plates"])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_vectorized_chains_match_the_exact_posterior(name, jit_compile):
    model, args = SUITE[name]
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        GWG(model, jit_compile=jit_compile),
        num_samples=1500,
        warmup_steps=100,
        num_chains=32,
        disable_progbar=True,
    )
    mcmc.run(*args)
    codes, post = codes_of(mcmc, name)
    assert codes.shape[:2] == (32, 1500)
    assert_exact(codes, post)


def test_results_interface_matches_pyro():
    model, args = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(model), num_samples=60, warmup_steps=10, num_chains=12, disable_progbar=True)
    mcmc.run(*args)
    assert mcmc.get_samples()["x"].shape == (12 * 60, 5)
    assert mcmc.get_samples(25)["x"].shape == (25, 5)
    diag = mcmc.diagnostics()
    assert diag["x"]["n_eff"].shape == (5,)
    assert list(diag["accepted"]) == ["chain {}".format(c) for c in range(12)]
    assert diag["accepted"]["chain 11"].shape == (60,)
    assert 0 < diag["acceptance rate"]["chain 3"] <= 1
    stats = mcmc.get_statistics()
    assert stats["log_joint"].shape == (12, 60) and stats["num_changed"].eq(1).all()
    timing = mcmc.timing
    assert set(timing) == {"setup", "warmup", "sampling", "compile", "background_compile"}
    assert all(timing[k] > 0 for k in ("setup", "warmup", "sampling", "compile"))
    # no background compile in the test suite (see conftest.py)
    assert timing["background_compile"] == 0
    # the default jit_compile="auto" captures the transition at its second step: a part
    # of the warmup and sampling time, reported on its own
    assert timing["compile"] < timing["warmup"] + timing["sampling"]


@pytest.mark.slow
def test_seeded_runs_are_reproducible():
    model, args = SUITE["mixed_kinds"]
    runs = []
    for _ in range(2):
        pyro.set_rng_seed(3)
        mcmc = MCMC(GWG(model), 30, 5, num_chains=8, disable_progbar=True)
        mcmc.run(*args)
        runs.append(mcmc.get_samples())
    for name in runs[0]:
        assert torch.equal(runs[0][name], runs[1][name])


def _run_on(device):
    """Run GWG on ``device`` with CPU model arguments; return the run and the device
    types that the model saw its argument on and the hook saw the chains on."""
    seen = set()

    def model(logits):
        seen.add(("argument", logits.device.type))
        with pyro.plate("bits", logits.shape[-1]):
            pyro.sample("x", dist.Bernoulli(logits=logits))

    def hook(kernel, params, stage, i):
        seen.add(("chains", params["x"].device.type))

    mcmc = MCMC(GWG(model), 10, 2, num_chains=3, device=device, hook_fn=hook, disable_progbar=True)
    mcmc.run(torch.tensor([0.5, -1.0, 2.0]))
    return mcmc, seen


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")], ids=["str", "torch.device"])
def test_a_cpu_device_is_parsed_and_the_run_stays_on_it(device):
    mcmc, seen = _run_on(device)
    assert mcmc.device == torch.device("cpu")
    assert seen == {("argument", "cpu"), ("chains", "cpu")}
    assert mcmc.get_samples()["x"].device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", 0, torch.device("cuda", 0)])
def test_a_cuda_device_moves_the_arguments_and_the_chains_to_the_gpu(device):
    mcmc, seen = _run_on(device)
    assert mcmc.device == torch.device("cuda", 0) or mcmc.device == torch.device("cuda")
    # the CPU argument was moved before the model saw it, and the chains ran there
    assert seen == {("argument", "cuda"), ("chains", "cuda")}
    assert mcmc.get_samples()["x"].shape == (30, 3)


def test_model_that_does_not_batch_runs_with_a_warning():
    def model():
        with pyro.plate("bits", 3):
            x = pyro.sample("x", dist.Bernoulli(0.5))
        pyro.factor("total", x.sum())  # sums over the chain dimension too

    mcmc = MCMC(GWG(model), num_samples=5, num_chains=4, disable_progbar=True)
    with pytest.warns(pyro_gwg.BatchingWarning, match="'total'"):
        mcmc.run()
    assert mcmc.get_samples(group_by_chain=True)["x"].shape == (4, 5, 3)
    # one chain at a time works
    mcmc = MCMC(GWG(model), 5, num_chains=2, chain_method="sequential", disable_progbar=True)
    mcmc.run()


def test_bad_arguments_are_refused():
    model, _ = SUITE["coupled_binary_field"]
    with pytest.raises(ValueError, match="chain_method"):
        MCMC(GWG(model), 10, chain_method="threads")
    with pytest.raises(ValueError, match="thinning"):
        MCMC(GWG(model), 10, thinning=0)
    with pytest.raises(TypeError, match="MixedGibbs and Pyro's HMC or NUTS.*pyro.infer.MCMC"):
        MCMC(pyro.infer.mcmc.RandomWalkKernel(model), 10)


@pytest.mark.parametrize(
    "how",
    [
        dict(num_chains=4),
        dict(num_chains=4, chains_per_block=2),
        dict(num_chains=1),
        dict(num_chains=2, chain_method="sequential"),
    ],
    ids=["batched", "blocks", "one chain", "sequential"],
)
def test_a_run_leaves_the_kernel_as_it_was(how):
    # the runner passes what a run needs to kernel.start and sets nothing on the kernel
    model, args = SUITE["coupled_binary_field"]
    kernel = GWG(model, jit_compile=False)
    before = dict(kernel.__dict__)
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, 150, 10, disable_progbar=True, **how)
    mcmc.run(*args)
    assert mcmc.get_samples(group_by_chain=True)["x"].shape == (how["num_chains"], 150, 5)
    assert kernel.__dict__.keys() == before.keys()
    changed = [name for name, value in kernel.__dict__.items() if value is not before[name]]
    assert changed == []


def test_a_mixed_gibbs_run_leaves_the_kernel_as_it_was():
    # each chain runs its own copy of the HMC/NUTS kernel, and the discrete half runs
    # as a ChainRun: MixedGibbs and the two kernels it holds are left as they were
    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y)):
            x = pyro.sample("x", dist.Bernoulli(logits=mu))
            pyro.sample("y", dist.Normal(x, 1.0), obs=y)

    kernel = MixedGibbs(HMC(model, num_steps=2), GWG(jit_compile=False))
    parts = (kernel, kernel.inner_kernel, kernel.discrete_kernel)
    before = [dict(part.__dict__) for part in parts]
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, 5, 3, num_chains=3, disable_progbar=True)
    mcmc.run(torch.tensor([0.3, 1.2, -0.4]))
    assert mcmc.get_samples(group_by_chain=True)["mu"].shape == (3, 5)
    for part, old in zip(parts, before):
        assert part.__dict__.keys() == old.keys()
        assert [name for name, value in part.__dict__.items() if value is not old[name]] == []


# ---------------------------------------------------------------- Pyro's interface


def test_the_runner_is_a_pyro_abstract_mcmc_with_pyros_signature():
    import inspect

    from pyro.infer.mcmc.api import AbstractMCMC

    model, _ = SUITE["coupled_binary_field"]
    mcmc = MCMC(GWG(model), 10, disable_progbar=True)
    assert isinstance(mcmc, AbstractMCMC)
    assert mcmc.transforms == {} and mcmc.num_chains == 1
    ours = inspect.signature(MCMC).parameters
    pyros = inspect.signature(pyro.infer.MCMC).parameters
    positional = [p for p in ours.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert [p.name for p in positional] == list(pyros)
    assert all(p.default == pyros[p.name].default for p in positional)
    keyword_only = [name for name, p in ours.items() if p.kind is p.KEYWORD_ONLY]
    assert keyword_only == [
        "chain_method",
        "thinning",
        "device",
        "chains_per_block",
        "num_workers",
        "ray_remote_args",
    ]


def test_the_old_positional_order_is_refused_and_pyros_order_works():
    model, _ = SUITE["coupled_binary_field"]
    # before: (kernel, num_samples, warmup_steps, num_chains, ...)
    with pytest.raises(TypeError, match="fourth positional.*pass num_chains=4 by keyword"):
        MCMC(GWG(model), 100, 50, 4)
    mcmc = MCMC(GWG(model), 100, 50, None, 4)
    assert (mcmc.num_samples, mcmc.warmup_steps, mcmc.num_chains) == (100, 50, 4)
    assert mcmc.initial_params is None
    with pytest.raises(TypeError):  # the extras are keyword-only
        MCMC(GWG(model), 10, 0, None, 1, None, None, True, True, None, None, "sequential")


def test_warmup_defaults_to_num_samples_and_hooks_count_per_stage_as_in_pyro():
    model, (y,) = SUITE["coupled_binary_field"]
    assert MCMC(GWG(model), 7).warmup_steps == 7
    assert MCMC(GWG(model), 7, 0).warmup_steps == 0
    calls = {}
    for runner in (pyro.infer.MCMC, MCMC):
        seen = calls[runner] = []
        mcmc = runner(
            GWG(model),
            6,
            hook_fn=lambda kernel, params, stage, i, seen=seen: seen.append((stage, i)),
            disable_progbar=True,
        )
        mcmc.run(y)
    expected = [("Warmup", i) for i in range(6)] + [("Sample", i) for i in range(6)]
    assert calls[pyro.infer.MCMC] == expected
    assert calls[MCMC] == expected


def test_disable_validation_none_leaves_pyros_setting():
    model, (y,) = SUITE["coupled_binary_field"]
    seen = []
    mcmc = MCMC(
        GWG(model),
        2,
        0,
        disable_validation=None,
        hook_fn=lambda *_: seen.append(dist.is_validation_enabled()),
        disable_progbar=True,
    )
    for enabled in (True, False):
        with pyro.validation_enabled(enabled):
            mcmc.run(y)
        assert set(seen) == {enabled}
        seen.clear()


@pytest.mark.slow
@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_save_params_keeps_only_the_named_sites(chain_method):
    model, args = SUITE["mixed_kinds"]
    runs = {}
    for save_params in (None, ["k", "z"]):
        pyro.set_rng_seed(0)
        mcmc = MCMC(
            GWG(model),
            20,
            5,
            num_chains=2,
            save_params=save_params,
            chain_method=chain_method,
            disable_progbar=True,
        )
        mcmc.run(*args)
        runs[save_params is None] = mcmc
    full, saved = runs[True], runs[False]
    assert set(full.get_samples()) == {"b", "z", "c", "k"}
    samples = saved.get_samples(group_by_chain=True)
    assert set(samples) == {"z", "k"}
    # only the saved sites' coordinates are held, during the run as after it
    kept = sum(site.num_coords for site in full.draws.sites if site.name in samples)
    assert saved.draws.codes.shape[-1] == kept < full.draws.codes.shape[-1]
    for name, value in samples.items():  # the same draws as the run that saves all
        assert torch.equal(value, full.get_samples(group_by_chain=True)[name])
    diag = saved.diagnostics()
    assert "z" in diag and "k" in diag and "b" not in diag and "c" not in diag
    assert diag["z"]["n_eff"].shape == full.diagnostics()["z"]["n_eff"].shape
    with pytest.warns(UserWarning, match="b, c of the model have no samples.*no log_likelihood"):
        idata = pyro_gwg.to_inference_data(saved)  # the likelihood needs every latent site
    assert set(idata.posterior.data_vars) == {"z", "k"}
    assert (idata.posterior["k"].values == samples["k"].numpy()).all()


# ---------------------------------------------------------------- arguments


def leading_one(y):
    # a site whose own shape starts with 1: [1, 3] is one chain's value, [1, 1, 3] the
    # same with its chain dimension
    x = pyro.sample("x", dist.Bernoulli(torch.tensor([[0.3, 0.6, 0.5]])).to_event(2))
    pyro.sample("y", dist.Normal(x.sum((-2, -1)), 1.0), obs=y)


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential", "parallel"])
def test_one_chain_takes_its_initial_values_with_or_without_the_chain_dim(chain_method, request):
    # as pyro.infer.MCMC takes them for one chain; both give the same run
    if chain_method == "parallel":
        request.getfixturevalue("worker_processes")
    start = torch.tensor([[1.0, 0.0, 1.0]])
    runs = []
    for value in (start, start[None]):
        pyro.set_rng_seed(0)
        mcmc = MCMC(
            GWG(leading_one, jit_compile=False),
            20,
            0,
            {"x": value},
            chain_method=chain_method,
            disable_progbar=True,
        )
        mcmc.run(torch.tensor(2.0))
        runs.append(mcmc.get_samples(group_by_chain=True)["x"])
    assert runs[0].shape == (1, 20, 1, 3) and torch.equal(runs[0], runs[1])
    # the kernel (as pyro.infer.MCMC drives it) starts where it is told, either way
    for value in (start, start[None]):
        kernel = GWG(leading_one, jit_compile=False)
        kernel.initial_params = {"x": value}
        kernel.setup(0, torch.tensor(2.0))
        assert torch.equal(kernel.initial_params["x"], start)
    bad = MCMC(GWG(leading_one), 5, 0, {"x": torch.zeros(3)}, disable_progbar=True)
    with pytest.raises(ValueError, match="Initial value of latent site 'x'.*has shape"):
        bad.run(torch.tensor(2.0))


@pytest.mark.parametrize("method", ["get_samples", "get_statistics", "diagnostics", "summary"])
def test_results_before_run_are_an_error(method):
    model, _ = SUITE["coupled_binary_field"]
    mcmc = MCMC(GWG(model), 10, disable_progbar=True)
    with pytest.raises(RuntimeError, match="has no draws yet: call run\\(\\) first"):
        getattr(mcmc, method)()


def _raise_at(step, error):
    def hook(kernel, params, stage, i):
        if i == step:
            raise error

    return hook


@pytest.mark.parametrize("where", ["hook", "kernel"])
def test_a_run_that_raises_leaves_no_stale_results(where, monkeypatch):
    model, (y,) = SUITE["coupled_binary_field"]
    mcmc = MCMC(GWG(model), 20, 5, num_chains=3, disable_progbar=True)
    mcmc.run(y)
    assert mcmc.get_samples()["x"].shape == (60, 5)
    if where == "hook":
        mcmc.hook_fn = _raise_at(12, ValueError("hook failed"))
    else:  # the kernel raising mid-run (e.g. a log density that became invalid)
        calls = []
        run = ChainDriver.run

        def failing_run(driver, *args, **kwargs):
            calls.append(1)
            if len(calls) > 1:
                raise ValueError("log density is nan")
            return run(driver, *args, **kwargs)

        monkeypatch.setattr(ChainDriver, "run", failing_run)
    with pytest.raises(ValueError):
        mcmc.run(y + 1.0)
    assert mcmc.timing == {}
    for method in ("get_samples", "get_statistics", "diagnostics", "summary"):
        with pytest.raises(RuntimeError, match="last call of run\\(\\) raised"):
            getattr(mcmc, method)()
    with pytest.raises(RuntimeError, match="last call of run\\(\\) raised"):
        pyro_gwg.to_inference_data(mcmc)
    mcmc.hook_fn = None
    monkeypatch.undo()
    mcmc.run(y)  # and the object runs again
    assert mcmc.get_samples()["x"].shape == (60, 5)


# ---------------------------------------------------------------- Ctrl-C


def test_ctrl_c_keeps_the_draws_taken_so_far():
    model, (y,) = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    # warmup steps 0-4, then draws 0-...: interrupted after draw 6 (7 draws)
    mcmc = MCMC(
        GWG(model),
        40,
        5,
        num_chains=3,
        hook_fn=_raise_at(6, KeyboardInterrupt()),
        disable_progbar=True,
    )
    with (
        pytest.raises(KeyboardInterrupt),
        pytest.warns(UserWarning, match="interrupted.* kept 7 draws per chain of 3 chains"),
    ):
        mcmc.run(y)
    assert mcmc.interrupted and mcmc.num_draws_kept == 7
    with pytest.warns(UserWarning, match="partial"):
        samples = mcmc.get_samples(group_by_chain=True)
    assert samples["x"].shape == (3, 7, 5)
    with pytest.warns(UserWarning, match="partial"):
        stats = mcmc.get_statistics()
    assert stats["accepted"].shape == (3, 7)
    # the statistics belong to the draws
    energy = pyro_gwg.ModelDensity(model, (y,))
    lp = energy.log_joint(samples["x"].reshape(21, 5).long(), batched=False)
    assert torch.allclose(stats["log_joint"].reshape(21), lp, atol=1e-5)
    with pytest.warns(UserWarning, match="partial"):
        assert mcmc.diagnostics()["accepted"]["chain 2"].shape == (7,)
    with pytest.warns(UserWarning, match="partial"):
        mcmc.summary()
    with pytest.warns(UserWarning, match="partial"):
        idata = pyro_gwg.to_inference_data(mcmc)
    assert idata.posterior["x"].shape == (3, 7, 5)
    mcmc.hook_fn = None
    mcmc.run(y)  # a full run clears the mark
    assert not mcmc.interrupted and mcmc.get_samples()["x"].shape == (120, 5)


def test_ctrl_c_during_warmup_keeps_nothing_and_says_so():
    model, (y,) = SUITE["coupled_binary_field"]
    mcmc = MCMC(GWG(model), 10, 5, hook_fn=_raise_at(2, KeyboardInterrupt()), disable_progbar=True)
    with pytest.raises(KeyboardInterrupt), pytest.warns(UserWarning, match="kept no draws"):
        mcmc.run(y)
    assert mcmc.interrupted and mcmc.num_draws_kept == 0
    with pytest.raises(RuntimeError, match="interrupted before it kept any draw"):
        mcmc.get_samples()


def test_ctrl_c_in_sequential_chains_keeps_the_finished_chains():
    model, (y,) = SUITE["coupled_binary_field"]
    steps = []

    def hook(kernel, params, stage, i):
        steps.append(i)
        if len(steps) == 2 * 12 + 4:  # chain 0, chain 1 and 4 steps into chain 2
            raise KeyboardInterrupt

    mcmc = MCMC(GWG(model), 10, 2, num_chains=4, chain_method="sequential", hook_fn=hook)
    mcmc.disable_progbar = True
    with (
        pytest.raises(KeyboardInterrupt),
        pytest.warns(UserWarning, match="kept 10 draws per chain of 2 chains"),
    ):
        mcmc.run(y)
    with pytest.warns(UserWarning, match="partial"):
        assert mcmc.get_samples(group_by_chain=True)["x"].shape == (2, 10, 5)


# ---------------------------------------------------------------- Predictive


def index_mixture(y=None):
    locs = torch.tensor([-2.0, 0.0, 2.5])
    shift = pyro.sample("shift", dist.Bernoulli(0.5))
    with pyro.plate("points", 4):
        z = pyro.sample("z", dist.Categorical(logits=torch.zeros(3)))
        pyro.sample("y", dist.Normal(locs[z] + shift, 0.7), obs=y)


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_categorical_draws_are_indices_that_predictive_can_use(chain_method, capsys):
    y = torch.tensor([-2.1, 0.2, 2.4, 2.7])
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        GWG(index_mixture), 50, 10, num_chains=2, chain_method=chain_method, disable_progbar=True
    )
    mcmc.run(y)
    samples = mcmc.get_samples()
    assert samples["z"].dtype == torch.long and samples["z"].shape == (100, 4)
    assert samples["shift"].dtype == torch.get_default_dtype()
    assert mcmc.get_samples(7)["z"].dtype == torch.long
    predictive = pyro.infer.Predictive(index_mixture, posterior_samples=samples)
    assert predictive()["y"].shape == (100, 4)
    diag = mcmc.diagnostics()
    assert diag["z"]["n_eff"].shape == (4,) and diag["z"]["n_eff"].dtype.is_floating_point
    mcmc.summary()
    assert "z[3]" in capsys.readouterr().out


# ---------------------------------------------------------------- pyro.infer.MCMC statistics


@pytest.mark.parametrize("num_chains", [1, 3])
def test_kernel_statistics_are_stored_compactly_with_the_same_diagnostics(num_chains):
    model, (y,) = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    kernel = GWG(model)
    kernel.vectorized_chains = num_chains
    kernel.setup(4, y)
    infos, step, run = [], kernel.driver.step, kernel.driver.run

    def recording(extras=None):  # every step's statistics, as the driver hands them out
        info, values = step(extras)
        infos.append({k: v.clone() for k, v in info._asdict().items()})
        infos[-1]["log_joint"] = kernel.state.log_joint.clone()
        return info, values

    def recording_blocks(num_steps, observe, every=1, **kwargs):  # (the steps computed ahead)
        def tee(t, info, codes, log_joint):
            for i in range(codes.shape[1]):
                infos.append({k: v[:, i].clone() for k, v in info._asdict().items()})
                infos[-1]["log_joint"] = log_joint[:, i].clone()
            observe(t, info, codes, log_joint)

        run(num_steps, tee, every, **kwargs)

    kernel.driver.step, kernel.driver.run = recording, recording_blocks
    params = kernel.initial_params
    for _ in range(4 + 300):  # 300 draws: the buffers grow several times
        params = kernel.sample(params)
    assert len(infos) >= 4 + 300  # (steps computed ahead of the draws at the end)
    infos = infos[4 : 4 + 300]
    diag = kernel.diagnostics()
    names = {"accepted", "accept_prob", "num_changed", "energy_evals", "grad_evals", "log_joint"}
    assert set(diag) == names | {"divergences", "acceptance rate"}
    shape = (300,) if num_chains == 1 else (300, num_chains)
    for name in names:
        assert diag[name].shape == shape
        expected = torch.stack([info[name] for info in infos])
        assert torch.equal(diag[name], expected.reshape(shape))
    assert diag["acceptance rate"] == pytest.approx(float(diag["accepted"].float().mean()))
    # about one row per draw: a tensor per statistic, grown geometrically
    per_draw = sum(diag[n].element_size() * num_chains for n in names)
    held = sum(v.untyped_storage().nbytes() for v in kernel._draw_stats.values())
    assert held <= 2 * 300 * per_draw
    kernel.cleanup()
    assert kernel.diagnostics() == {"divergences": []}


def test_pyro_infer_mcmc_diagnostics_keep_their_structure():
    model, (y,) = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = pyro.infer.MCMC(GWG(model), num_samples=40, warmup_steps=5, num_chains=2)
    mcmc.run(y)
    diag = mcmc.diagnostics()
    assert diag["accepted"]["chain 1"].shape == (40,) and diag["divergences"]["chain 0"] == []
    assert 0 <= diag["acceptance rate"]["chain 0"] <= 1
    energy = pyro_gwg.ModelDensity(model, (y,))
    x = mcmc.get_samples(group_by_chain=True)["x"]
    for c in range(2):
        lp = energy.log_joint(x[c].long(), batched=False)
        assert torch.allclose(diag["log_joint"]["chain {}".format(c)], lp, atol=1e-5)

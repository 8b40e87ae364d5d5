"""pyro_gwg.runner.draws: the draws of a run as codes, their decoding, statistics,
diagnostics and summary table (read through pyro_gwg.MCMC and its ``draws``)."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from small_models import SUITE

import pyro_gwg
from pyro_gwg import GWG, MCMC

pytestmark = pytest.mark.filterwarnings("ignore:Categorical site")


def test_the_runners_draws_are_a_public_draws_object():
    model, args = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(model), 20, num_chains=3, disable_progbar=True)
    mcmc.run(*args)
    draws = mcmc.draws
    assert isinstance(draws, pyro_gwg.Draws)
    assert (draws.num_chains, draws.num_draws) == (3, 20)
    assert [site.name for site in draws.sites] == ["x"]
    assert torch.equal(
        draws.samples(group_by_chain=True)["x"], mcmc.get_samples(group_by_chain=True)["x"]
    )
    assert draws.statistics.keys() == mcmc.get_statistics().keys()
    assert draws.integer_samples()["x"].dtype == torch.int8
    assert draws.chain_statistics()["divergences"] == {"chain {}".format(c): [] for c in range(3)}
    unrun = MCMC(GWG(model), 20)
    with pytest.raises(RuntimeError, match="no draws yet: call run"):
        unrun.draws.samples()


@pytest.mark.slow
@pytest.mark.parametrize("chain_method", ["vectorized", "sequential", "parallel"])
def test_thinning_keeps_every_kth_draw(chain_method, request):
    if chain_method == "parallel":
        request.getfixturevalue("worker_processes")
    model, args = SUITE["coupled_binary_field"]
    mcmc = MCMC(
        GWG(model),
        num_samples=30,
        num_chains=2,
        thinning=3,
        chain_method=chain_method,
        disable_progbar=True,
    )
    mcmc.run(*args)
    assert mcmc.get_samples(group_by_chain=True)["x"].shape == (2, 10, 5)
    assert mcmc.get_statistics()["accepted"].shape == (2, 10)


def test_summary_prints_a_table(capsys):
    model, args = SUITE["coupled_binary_field"]
    mcmc = MCMC(GWG(model), num_samples=30, num_chains=4, disable_progbar=True)
    mcmc.run(*args)
    mcmc.summary()
    assert "x[4]" in capsys.readouterr().out


def test_draws_are_kept_as_codes_and_decoded_in_chunks(monkeypatch):
    import pyro_gwg.runner.draws as draws_module

    model, (y,) = SUITE["coupled_binary_field"]
    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(model), 200, num_chains=4, disable_progbar=True)
    mcmc.run(y)
    rows = []
    decode = pyro_gwg.ModelDensity.values_from_codes

    def recording(self, codes):
        rows.append(codes.shape[0])
        return decode(self, codes)

    monkeypatch.setattr(pyro_gwg.ModelDensity, "values_from_codes", recording)
    monkeypatch.setattr(draws_module, "DECODE_ELEMENTS", 5 * 64)  # 64 draws of 5 coordinates
    samples = mcmc.get_samples(group_by_chain=True)["x"]
    assert samples.shape == (4, 200, 5) and samples.dtype == torch.get_default_dtype()
    assert rows and max(rows) <= 64 and sum(rows) == 800
    # the decoded draws are not kept: every call decodes from the codes again
    rows.clear()
    again = mcmc.get_samples(group_by_chain=True)["x"]
    assert torch.equal(samples, again) and sum(rows) == 800
    # num_samples draws only the draws it returns
    rows.clear()
    assert mcmc.get_samples(num_samples=10)["x"].shape == (10, 5)
    assert sum(rows) == 10


@pytest.mark.slow
def test_peak_memory_of_a_run_is_a_small_multiple_of_its_draws():
    import json
    import subprocess
    import sys

    code = """
import json, resource, torch, pyro
from pyro_gwg import GWG, MCMC
from pyro_gwg.models import lattice_ising
torch.set_num_threads(1)
pyro.set_rng_seed(0)
small = MCMC(GWG(lattice_ising, jit_compile=True), 16, num_chains=16, disable_progbar=True)
small.run(size=10)  # imports, tracing and the allocator's first pools
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
mcmc = MCMC(GWG(lattice_ising, jit_compile=True), 10000, num_chains=64, disable_progbar=True)
mcmc.run(size=10)
run = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"base": base, "run": run}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peaks = json.loads(out.stdout.strip().splitlines()[-1])
    stored_kib = 64 * 10000 * 100 / 1024  # int8 codes
    assert peaks["run"] - peaks["base"] < 3 * stored_kib


def with_a_fixed_bit(y):
    """Five bits; the last has logit 40, so it never leaves 1."""
    with pyro.plate("bits", 5):
        x = pyro.sample("x", dist.Bernoulli(logits=torch.tensor([0.5, -0.5, 0.0, 1.0, 40.0])))
    pyro.sample("y", dist.Normal(x.sum(-1, keepdim=True), 1.0), obs=y)


def fixed_bit_run(num_samples=300):
    pyro.set_rng_seed(0)
    start = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0]]).expand(4, 5)
    mcmc = MCMC(
        GWG(with_a_fixed_bit),
        num_samples,
        20,
        num_chains=4,
        initial_params={"x": start},
        disable_progbar=True,
    )
    mcmc.run(torch.tensor([2.5]))
    return mcmc


def test_a_constant_coordinate_has_nan_diagnostics_and_the_others_do_not():
    import warnings

    mcmc = fixed_bit_run()
    with warnings.catch_warnings():
        # x[4] never changed, as an exact sampler does (its other value has probability
        # e^-40): nothing to warn about, and run() would have said so otherwise
        warnings.simplefilter("error")
        diag = mcmc.diagnostics()["x"]
    assert torch.isfinite(diag["n_eff"][:4]).all() and (diag["n_eff"][:4] > 10).all()
    assert torch.isfinite(diag["r_hat"][:4]).all()
    assert torch.isnan(diag["n_eff"][4]) and torch.isnan(diag["r_hat"][4])
    # the same numbers as for the moving coordinates alone (R-hat: Pyro's)
    from pyro.ops.stats import split_gelman_rubin

    from pyro_gwg.diagnostics import site_diagnostics

    x = mcmc.get_samples(group_by_chain=True)["x"][..., :4]
    assert torch.allclose(diag["n_eff"][:4], site_diagnostics(x)["n_eff"], rtol=1e-4)
    assert torch.allclose(diag["r_hat"][:4], split_gelman_rubin(x), rtol=1e-4)


def test_summary_reports_the_moving_coordinates(capsys):
    mcmc = fixed_bit_run()
    mcmc.summary()
    rows = {
        line.split()[0]: line.split()[1:]
        for line in capsys.readouterr().out.splitlines()[2:]
        if line.strip()
    }
    assert set(rows) == {"x[{}]".format(i) for i in range(5)}
    for i in range(4):
        n_eff, r_hat = float(rows["x[{}]".format(i)][5]), float(rows["x[{}]".format(i)][6])
        assert n_eff > 10 and 0.9 < r_hat < 1.2
    assert rows["x[4]"][5] == "nan" and rows["x[4]"][0] == "1.00"


def test_summary_of_a_categorical_site_reports_each_category(capsys):
    # the mean class index means nothing: one row per category, the indicator's
    # frequency, n_eff and r_hat
    from pyro_gwg.diagnostics import site_diagnostics

    def model():
        with pyro.plate("p", 2):
            pyro.sample("z", dist.Categorical(torch.tensor([0.2, 0.3, 0.5])))
        pyro.sample("w", dist.Categorical(torch.tensor([0.9, 0.1])))
        pyro.sample("b", dist.Bernoulli(0.3))

    pyro.set_rng_seed(0)
    mcmc = MCMC(GWG(model, jit_compile=False), 200, 20, num_chains=2, disable_progbar=True)
    mcmc.run()
    mcmc.summary()
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in lines[2:] if line}
    labels = ["z[{}]={}".format(i, k) for i in range(2) for k in range(3)] + ["w=0", "w=1", "b"]
    assert list(rows) == labels
    samples = mcmc.get_samples(group_by_chain=True)
    for name, categories in (("z", 3), ("w", 2)):
        indicators = (samples[name].unsqueeze(-1) == torch.arange(categories)).float()
        n_eff = site_diagnostics(indicators)["n_eff"].reshape(-1)
        frequency = indicators.mean((0, 1)).reshape(-1)
        names = [label for label in labels if label.startswith(name)]
        for label, p, e in zip(names, frequency, n_eff):
            assert rows[label][0] == pytest.approx(float(p), abs=0.006)
            assert rows[label][5] == pytest.approx(float(e), abs=0.006)
    assert sum(rows["z[1]={}".format(k)][0] for k in range(3)) == pytest.approx(1, abs=0.02)
    # diagnostics() keeps one entry per coordinate
    assert mcmc.diagnostics()["z"]["n_eff"].shape == (2,)


def test_diagnostics_of_very_short_runs_are_nan_not_an_error():
    model, (y,) = SUITE["coupled_binary_field"]
    mcmc = MCMC(GWG(model), 3, num_chains=2, disable_progbar=True)
    mcmc.run(y)
    diag = mcmc.diagnostics()["x"]  # split R-hat needs 4 draws
    assert diag["r_hat"].shape == (5,) and torch.isnan(diag["r_hat"]).all()


def test_draws_hold_continuous_values_beside_the_codes(capsys):
    # a MixedGibbs or HMC/NUTS run: the continuous sites' values next to the discrete
    # codes, stored thinned as the codes are, returned, summarised and diagnosed with them
    from pyro_gwg.runner.draws import DrawBuffers, saved

    model, args = SUITE["coupled_binary_field"]
    energy = pyro_gwg.ModelDensity(model, args)
    buffers = DrawBuffers(2, 3, 2, torch.int8, torch.device("cpu"), saved(energy, None), ["mu"])
    codes = torch.randint(0, 2, (2, 6, energy.num_coords))
    mu = torch.randn(2, 6, 4)
    diverging = torch.zeros(2, 6, dtype=torch.bool)
    stats = {"discrete accepted": torch.rand(2, 6) < 0.5, "diverging": diverging}
    diverging[1, 3] = True  # the 4th draw of chain 1: kept (every 2nd)
    buffers.store(0, stats, codes, None, slice(0, 2), {"mu": mu, "other": mu})
    draws = buffers.draws()
    assert torch.equal(draws.continuous["mu"], mu[:, 1::2]) and draws.continuous.keys() == {"mu"}
    assert torch.equal(draws.codes, codes[:, 1::2].to(torch.int8))
    assert draws.statistics.keys() == {"discrete accepted", "diverging"}
    samples = draws.samples(group_by_chain=True)
    assert samples.keys() == {"x", "mu"} and torch.equal(samples["mu"], mu[:, 1::2])
    assert draws.samples()["mu"].shape == (6, 4)
    assert draws.samples(4)["mu"].shape == (4, 4)
    assert draws.samples(4, group_by_chain=True)["mu"].shape == (2, 4, 4)
    stats = draws.chain_statistics()
    assert stats["divergences"] == {"chain 0": [], "chain 1": [1]}
    assert stats["discrete acceptance rate"].keys() == {"chain 0", "chain 1"}
    assert draws.diagnostics()["mu"]["r_hat"].shape == (4,)
    draws.summary()
    assert "mu[3]" in capsys.readouterr().out
    none = DrawBuffers(2, 1, 1, torch.int8, torch.device("cpu"), saved(None, None), ["mu"])
    none.store(0, {}, torch.zeros(2, 1, 0, dtype=torch.long), None, slice(0, 2), {"mu": mu[:, :1]})
    assert none.draws().samples().keys() == {"mu"}

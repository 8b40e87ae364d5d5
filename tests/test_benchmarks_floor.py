"""Tests of ``benchmarks/floor.py``: the hand-written log densities and gains of its
fused GWG step against the Pyro models (autograd and exact differences), the step's
detailed balance on an enumerable Ising model (every draw sequence), its draws against
the exact posterior, and one setting of the harness run in this process (the JSON row
and the section ``benchmarks/report.py`` renders from it)."""

import importlib.util
import itertools
import math
from pathlib import Path

import pyro
import pyro.poutine as poutine
import pytest
import torch

import pyro_gwg
from tests.exactness import assert_exact

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name, module_name):
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def floor(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # peers
    return _load("floor.py", "bench_floor")


def _model_log_joint(model, site, value):
    """The model's log joint at ``value`` of ``site`` (one state)."""
    conditioned = poutine.condition(model, data={site: value})
    return poutine.trace(conditioned).get_trace().log_prob_sum()


def _check_terms(floor, target, rbm_path, shape):
    """``f`` up to a constant, and the gains as the autograd gradient times
    ``1 - 2 x``, against the user's Pyro model at a few random states."""
    model, site = floor.user_model(target, rbm_path)
    terms = floor.fused_terms(target, rbm_path)
    torch.manual_seed(0)
    states = torch.randint(0, 2, (4,) + shape).float()
    f, gains = terms(states.flatten(1))
    log_joint, grads = [], []
    for state in states:
        value = state.clone().requires_grad_()
        value_log_joint = _model_log_joint(model, site, value)
        (grad,) = torch.autograd.grad(value_log_joint, value)
        log_joint.append(value_log_joint.detach())
        grads.append(grad.flatten())
    log_joint, grads = torch.stack(log_joint), torch.stack(grads)
    # the same log density up to the priors' normaliser
    torch.testing.assert_close(f - f[0], log_joint - log_joint[0], rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(gains, grads * (1 - 2 * states.flatten(1)), rtol=1e-5, atol=1e-4)
    return terms, states.flatten(1), f, gains


def test_ising_terms_are_the_models_log_density_and_exact_flip_gains(floor, tmp_path):
    target = {"kind": "ising", "size": 4, "theta": 0.4}
    terms, x, f, gains = _check_terms(floor, target, tmp_path / "rbm.npz", (4, 4))
    # the Ising log density is linear in each spin: the gains are the exact changes
    for i in range(x.shape[1]):
        flipped = x.clone()
        flipped[:, i] = 1 - flipped[:, i]
        torch.testing.assert_close(terms(flipped)[0] - f, gains[:, i])


def test_rbm_terms_are_the_models_log_density_and_gradient(floor, tmp_path):
    _check_terms(floor, {"kind": "rbm"}, tmp_path / "rbm.npz", (784,))


def test_draw_coordinates_follows_the_coordinate_marginal(floor):
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.05, 0.0, 0.3, 0.15], dtype=torch.float64)
    draws = floor.draw_coordinates(probs.log().expand(4000, 5), 50)
    counts = torch.bincount(draws.flatten(), minlength=5).double()
    total = counts.sum()
    z = (counts - total * probs) / (total * probs * (1 - probs)).sqrt().clamp(min=1e-12)
    assert counts[2] == 0 and bool((z.abs() < 5).all()), counts


def test_fused_step_satisfies_detailed_balance(floor):
    """The transition matrix of the fused step's proposal and MH correction, summed
    over every ordered draw sequence, on the 3 x 3 Ising model (512 states)."""
    size, num_flips = 3, 2
    coords = size * size
    terms = floor.fused_terms({"kind": "ising", "size": size, "theta": 0.4}, None)
    states = torch.tensor(list(itertools.product([0.0, 1.0], repeat=coords)), dtype=torch.float64)
    x, f, log_q = floor.fused_init(terms, states)
    sequences = torch.tensor(list(itertools.product(range(coords), repeat=num_flips)))
    # every (state, sequence) pair: [S * Q, ...]
    pairs = (states.shape[0], sequences.shape[0])
    draws = sequences.repeat(states.shape[0], 1)
    start = torch.arange(states.shape[0]).repeat_interleave(sequences.shape[0])
    proposed = floor.propose(x[start], draws)
    _, f_new, log_q_new = floor.fused_init(terms, proposed)
    ratio = floor.log_ratio(f[start], log_q[start], f_new, log_q_new, draws)
    move = log_q[start].gather(1, draws).sum(-1).exp() * ratio.clamp(max=0).exp()
    weights = 2 ** torch.arange(coords - 1, -1, -1, dtype=torch.float64)
    end = (proposed @ weights).round().long()
    kernel = torch.zeros(pairs[0], pairs[0], dtype=torch.float64)
    kernel.index_put_((start, end), move, accumulate=True)
    kernel += torch.diag(1 - kernel.sum(-1))
    assert float(kernel.diagonal().min()) >= 0
    assert float((kernel - torch.diag(kernel.diagonal())).sum(-1).min()) > 0.01  # it moves
    target = torch.softmax(f, 0)
    flow = target.unsqueeze(-1) * kernel
    torch.testing.assert_close(flow, flow.T, rtol=0, atol=1e-15)
    torch.testing.assert_close(target @ kernel, target, rtol=0, atol=1e-15)


def test_fused_step_draws_match_the_exact_posterior(floor, tmp_path):
    target = {"kind": "ising", "size": 3, "theta": 0.4}
    model, _ = floor.user_model(target, tmp_path / "rbm.npz")
    terms = floor.fused_terms(target, None)
    step = floor.make_step(terms, 2)
    torch.manual_seed(1)
    state = floor.fused_init(terms, torch.randint(0, 2, (256, 9)).float())
    codes = []
    for t in range(400):
        *state, _ = step(*state)
        if t >= 50:
            codes.append(state[0].long())
    assert_exact(torch.stack(codes, 1), pyro_gwg.exact_posterior(model))


def test_one_setting_in_process_gives_a_row_and_a_report_section(floor, monkeypatch):
    """The worker of one setting in this process (the fused step uncompiled, no
    background compilation), its table row, and the report section of the rows."""
    monkeypatch.setattr(torch, "compile", lambda step, **options: step)
    monkeypatch.setenv("PYRO_GWG_BACKGROUND_COMPILE", "0")
    pyro.clear_param_store()
    target = {"kind": "ising", "size": 10, "theta": 0.4}
    spec = {
        "target": target,
        "chains": 4,
        "budget_s": 0.2,
        "threads": torch.get_num_threads(),
        "seed": 0,
        "warmup": 10,
        "pilot": 20,
        "compile_timeout": 5.0,
        "rbm_path": "unused.npz",
    }
    out = floor.run_main(spec)
    assert "default_error" not in out, out.get("default_error")
    for name in ("uncached", "cached"):
        run = out[name]
        assert run["us_per_step"] > 0 and run["num_samples"] >= spec["pilot"]
        assert run["num_flips"] >= 1 and 0 <= run["accept_rate"] <= 1
        assert "sampling" in run["timing"]
    for name in floor.FUSED_VARIANTS:
        fused = out[name]
        assert fused["us_per_step"] > 0 and fused["steps"] >= 50
        assert fused["num_flips"] == out["cached"]["num_flips"]
    out["first_draw"] = {
        "uncached": {"run_s": 2.5, "blocked_s": 0.6},
        "cached": {"run_s": 0.5, "blocked_s": 0.4},
    }
    row = floor.summarise(target, 16, out)
    assert row["ratio_cached"] == pytest.approx(
        out["cached"]["us_per_step"] / out["fused"]["us_per_step"]
    )
    rates = [out[k]["accept_rate"] for k in ("uncached", "cached", "fused")]
    same = max(abs(rates[0] - rates[2]), abs(rates[1] - rates[2])) <= floor.ACCEPT_TOLERANCE
    assert row["same_transition"] == same
    assert row["required"] == "<= 1.5x"
    assert row["met"] == (row["ratio_cached"] <= 1.5 and same)
    assert row["first_draw_met"] is False
    assert (row["blocked_uncached_s"], row["blocked_cached_s"]) == (0.6, 0.4)
    assert row["accept_rates"] == [out[k]["accept_rate"] for k in ("uncached", "cached", "fused")]
    assert floor.summarise(target, 256, out)["met"] is None  # no target at 256 chains

    report = _load("report.py", "bench_report_floor")
    section = "\n".join(report.render_floor({"note": floor.NOTE, "rows": [row]}))
    assert floor.NOTE in section and "Ising L=10 theta=0.4" in section
    assert math.isfinite(row["fused_us"])


def _dropin_run(us, loads=2):
    """A round of the drop-in comparison: ``{runner: us_per_draw result}``."""
    out = {
        name: {"us": value, "draws": 1000, "loads": loads if name != "pyro_loop" else 0}
        for name, value in zip(("pyro_infer", "pyro_gwg", "pyro_loop"), us)
    }
    out["pyro_gwg"]["compile_s"] = 0.2
    return out


def _dropin_out(
    rounds, fill_files=("aot/key.pt2",), after_files=("aot/key.pt2",), warm=1, compiling=False
):
    return {
        "target": {"kind": "ising", "size": 10, "theta": 0.4},
        "num_flips": 1,
        "warm_loads": {"pyro_infer": warm, "pyro_gwg": warm, "pyro_loop": 0},
        "cache_after_fill": {"still_compiling": compiling, "cache_files": list(fill_files)},
        "cache_after_rounds": {"still_compiling": False, "cache_files": list(after_files)},
        "rounds": rounds,
    }


def test_dropin_row_is_the_median_of_rounds_and_needs_the_compiled_package(floor):
    rounds = [_dropin_run(us) for us in ([150, 100, 60], [120, 100, 50], [300, 150, 70])]
    row = floor.summarise_dropin(_dropin_out(rounds))
    assert row["ratios"] == pytest.approx([1.5, 1.2, 2.0])
    assert row["ratio"] == pytest.approx(1.5)  # the median ratio, not a ratio of medians
    assert (row["pyro_infer_us"], row["pyro_gwg_us"], row["pyro_loop_us"]) == (150, 100, 60)
    assert row["kernel_us"] == 90 and row["kernel_ratio"] == pytest.approx(0.9)
    assert row["compiled"] == {"pyro_infer": True, "pyro_gwg": True, "cache_package": True}
    assert row["met"] is True and row["required"] == 1.5
    # a run that did not load the package, a compile of the rounds' own (a new file in
    # the cache), a compile still running after the fill: not met, whatever the ratio
    missed = [_dropin_run([150, 100, 60], loads=1)] + rounds[1:]
    assert floor.summarise_dropin(_dropin_out(missed))["compiled"]["pyro_infer"] is False
    for out in (
        _dropin_out(rounds, after_files=("aot/key.pt2", "aot/other.pt2")),
        _dropin_out(rounds, fill_files=(), after_files=()),
        _dropin_out(rounds, compiling=True),
        _dropin_out(rounds, warm=0),
    ):
        assert floor.summarise_dropin(out)["met"] is False


def test_dropin_in_process_gives_a_row_and_a_report_section(floor, monkeypatch, tmp_path):
    """The drop-in worker in this process with tiny budgets and no background
    compilation: the fill tried again, both runners and Pyro's loop timed, nothing
    loaded from the (empty) cache, so the target is not met; the report renders the
    row."""
    monkeypatch.setenv("PYRO_GWG_BACKGROUND_COMPILE", "0")
    monkeypatch.setenv("PYRO_GWG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(floor, "DROPIN_FILL_TRIES", 2)
    pyro.clear_param_store()
    spec = {
        "target": {"kind": "ising", "size": 10, "theta": 0.4},
        "budget_s": 0.05,
        "threads": torch.get_num_threads(),
        "seed": 0,
        "fill": 10,
        "short": 10,
        "pilot": 20,
        "rounds": 2,
        "compile_timeout": 1.0,
        "rbm_path": "unused.npz",
    }
    out = floor.run_dropin(spec)
    # no package loaded after a fill: the next seed is tried
    assert [fill["seed"] for fill in out["fill"]] == [0, 1]
    assert out["warm_loads"] == {"pyro_gwg": 0, "pyro_infer": 0, "pyro_loop": 0}
    assert [sorted(r) for r in out["rounds"]] == [sorted(floor.DROPIN_RUNNERS)] * 2
    assert list(out["rounds"][1]) == list(floor.DROPIN_RUNNERS[::-1])  # interleaved
    for r in out["rounds"]:
        assert all(run["draws"] >= spec["pilot"] and run["loads"] == 0 for run in r.values())
        assert r["pyro_gwg"]["compile_s"] is not None and r["pyro_infer"]["compile_s"] is None
    row = floor.summarise_dropin(out)
    assert row["num_flips"] == 1  # GWG's default
    assert row["compiled"] == {"pyro_infer": False, "pyro_gwg": False, "cache_package": False}
    assert row["met"] is False
    assert row["kernel_us"] == pytest.approx(row["pyro_infer_us"] - row["pyro_loop_us"])

    report = _load("report.py", "bench_report_floor_dropin")
    section = "\n".join(
        report.render_floor({"note": floor.NOTE, "rows": [], "dropin": {"rows": [row]}})
    )
    assert "Drop-in path" in section and "Ising L=10 theta=0.4" in section
    for key in ("pyro_infer_us", "pyro_gwg_us", "pyro_loop_us", "ratio"):
        assert report.fmt(row[key]) in section


def test_dropin_options(floor):
    assert floor.parse_args(["--dropin-only"]).dropin_only
    assert floor.parse_args(["--no-dropin"]).no_dropin
    with pytest.raises(SystemExit):
        floor.parse_args(["--dropin-only", "--no-dropin"])
    assert [t["kind"] for t in floor.dropin_targets(quick=False)] == ["ising", "rbm"]
    assert floor.dropin_targets(quick=True) == [{"kind": "ising", "size": 10, "theta": 0.4}]

"""Smoke test of ``benchmarks/real_models.py``: the harness on two models with tiny
budgets (one model whose latent sites are all discrete, one with a continuous site),
its JSON, the Auto-only re-run merged into it, and the section that
``benchmarks/report.py`` renders from it."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name, module_name):
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # sampling_common, step_cost
    return _load("real_models.py", "bench_real_models")


def test_quick_harness_writes_rows_summary_and_report(harness, tmp_path):
    output = tmp_path / "real_models.json"
    common = ["--quick", "--budget", "0.3", "--warmup", "10", "--output", str(output)]
    harness.main(common + ["--models", "asia,bernoulli_latent", "--methods", "nuts-enum,gibbs"])
    results = json.loads(output.read_text())
    rows = {(r["model"], r["method"], r["runner"]): r for r in results["rows"]}
    # asia has no continuous site: no NUTS row; Gibbs in both runners
    assert set(rows) == {
        ("asia", "gibbs", "pyro.infer.MCMC"),
        ("asia", "gibbs", "pyro_gwg.MCMC"),
        ("bernoulli_latent", "nuts-enum", "pyro.infer.MCMC"),
        ("bernoulli_latent", "gibbs", "pyro.infer.MCMC"),
        ("bernoulli_latent", "gibbs", "pyro_gwg.MCMC"),
    }
    for key in [("asia", "gibbs", "pyro.infer.MCMC"), ("asia", "gibbs", "pyro_gwg.MCMC")]:
        row = rows[key]
        assert row["status"] == "ok", row["status"]
        assert row["ess_per_s"] > 0 and row["sampling_s"] > 0 and row["warmup_s"] > 0
        # the exact reference (enumeration) is always there for asia; whether the z-test
        # counts depends on the ESS the tiny budget reached
        assert row["reference"] == "ok" and row["max_abs_z"] >= 0 and row["z_limit"] > 0
        assert row["exact"] in (True, False, None)
    nuts = rows[("bernoulli_latent", "nuts-enum", "pyro.infer.MCMC")]
    assert nuts["status"] == "ok" and nuts["draws"] >= 1
    assert nuts["min_ess_discrete"] is None  # NUTS sums z out and returns no draws of it
    mixed = rows[("bernoulli_latent", "gibbs", "pyro.infer.MCMC")]
    assert mixed["label"] == "MixedGibbs(NUTS, Gibbs)" and mixed["status"] == "ok"
    assert "min_ess_discrete" in mixed  # None when every element of z is rare in the run
    summary = {s["model"]: s for s in results["summary"]}
    assert summary["asia"]["best_ess_per_s"] > 0
    assert "loaded 2-core machine" in results["note"]

    # the Auto rows of one model, merged into the same file: the other rows stay
    harness.main(common + ["--models", "asia", "--methods", "auto", "--merge"])
    merged = json.loads(output.read_text())
    autos = {("asia", "auto", "pyro.infer.MCMC"), ("asia", "auto", "pyro_gwg.MCMC")}
    assert {(r["model"], r["method"], r["runner"]) for r in merged["rows"]} == set(rows) | autos
    assert [s["model"] for s in merged["summary"]] == ["bernoulli_latent", "asia"]

    report = _load("report.py", "bench_report")
    text = "\n\n".join(report.render_real_models(merged))
    assert "MixedGibbs(NUTS, Gibbs)" in text and "Auto / best" in text

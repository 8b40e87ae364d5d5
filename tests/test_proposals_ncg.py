"""The pure NCG / AVG / PAVG functions: proposal formulas, sampling, detailed balance
over every pair of states, and the preconditioner fit."""

import itertools
import math

import pytest
import torch
from test_proposals import FINITE_CAP, LAYOUTS, Target, make_layout
from test_proposals_layout import WINDOW, candidate_sets

from pyro_gwg.proposals.layout import CandidateGrid
from pyro_gwg.proposals.mh import accept_probability
from pyro_gwg.proposals.ncg import (
    GradientState,
    auxiliary_log_ratio,
    auxiliary_root,
    avg_proposal,
    factorised_log_prob,
    fit_preconditioner,
    ncg_init,
    ncg_log_ratio,
    ncg_proposal,
    ncg_step,
    pavg_init,
    pavg_step,
    preconditioner,
    sample_factorised,
)


def true_log_q(target, codes, linear, curvature, candidates):
    """log q(x' | .) of every joint candidate x' by normalising
    exp(<a, phi(x')> - kappa/2 |phi(x')|^2) over the whole product set (not per
    coordinate), with phi the target's own embedding."""
    joint = torch.tensor(list(itertools.product(*candidates)))
    phi = target.embed(joint)
    logits = phi @ linear - 0.5 * curvature * phi.pow(2).sum(-1)
    return joint, logits - logits.logsumexp(0)


def flat_grad(target, grad):
    return torch.cat(
        [grad[..., i, :size] for i, size in enumerate(target.sizes)], -1
    )  # [.., R] in the target's embedding order


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_ncg_proposal_is_the_papers_formula(name):
    layout = make_layout(LAYOUTS[name])
    target = Target(layout)
    grid = CandidateGrid(layout, window=WINDOW)
    states = target.states()[::3]
    _, grad = target.value_and_grad(states)
    step = torch.full((len(states),), 0.7)
    log_q, base = ncg_proposal(states, grad, step, grid)
    for c in range(len(states)):
        for i, values in enumerate(candidate_sets(layout, states[c])):
            x = int(states[c, i])
            if layout.is_scalar[i]:
                g = float(grad[c, i, 0])
                logits = [g * (v - x) / 2 - (v - x) ** 2 / (2 * 0.7) for v in values]
            else:
                logits = [float(grad[c, i, v]) / 2 - (v != x) / 0.7 for v in values]
            expected = torch.log_softmax(torch.tensor(logits), 0)
            slots = torch.tensor(values) - base[c, i]
            assert torch.allclose(log_q[c, i, slots], expected, atol=1e-5)


def _root(target, step_size, matrix):
    """A = (M + d I)^(1/2) and d, computed independently with an eigendecomposition."""
    dim = sum(target.sizes)
    matrix = torch.zeros(dim, dim) if matrix is None else matrix
    eigvals, eigvecs = torch.linalg.eigh(matrix.double())
    shift = 2 / step_size - min(float(eigvals.min()), 0.0)
    root = eigvecs @ torch.diag((eigvals + shift).sqrt()) @ eigvecs.T
    return root.float(), shift


def _grid_order(target, grid):
    """The target embeds coordinate by coordinate, as the grid does; check it."""
    states = target.states()
    assert torch.equal(target.embed(states), grid.embed(states))


def _matrix(target, kind):
    if kind is None:
        return None
    dim = sum(target.sizes)
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(dim, dim, generator=gen)
    return (a + a.T) / 2 if kind == "random" else target.a.clone()


@pytest.mark.parametrize("kind", [None, "random"])
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_auxiliary_proposal_is_the_papers_formula(name, kind):
    """q(x' | z, x) of (P)AVG against exp(<g - M phi(x) + A z, phi(x')> - d/2 |phi(x')|^2)
    normalised over all joint candidates, with z = A phi(x) + xi."""
    torch.manual_seed(0)
    layout = make_layout(LAYOUTS[name])
    target = Target(layout)
    grid = CandidateGrid(layout, window=WINDOW)
    _grid_order(target, grid)
    matrix = _matrix(target, kind)
    step_size = 0.6
    root, shift = _root(target, step_size, matrix)
    precond = None if matrix is None else preconditioner(matrix, 1)
    for x in target.states()[::4]:
        x = x.unsqueeze(0)
        _, grad = target.value_and_grad(x)
        noise = torch.randn(1, grid.relaxed_dim)
        phi = target.embed(x)
        z = phi @ root.T + noise
        m_phi = phi @ matrix.T if matrix is not None else 0.0
        linear = (flat_grad(target, grad) - m_phi + z @ root.T)[0]
        joint, expected = true_log_q(target, x[0], linear, shift, candidate_sets(layout, x[0]))
        root_noise, curvature = auxiliary_root(noise, torch.tensor([step_size]), precond)
        assert torch.allclose(curvature, torch.tensor([shift]).float())
        assert torch.allclose(root_noise, noise @ root.T, atol=1e-4)
        log_q, base = avg_proposal(x, grad, root_noise, curvature, grid)
        got = factorised_log_prob(log_q.expand(len(joint), -1, -1), base.expand_as(joint), joint)
        assert torch.allclose(got, expected.float(), atol=1e-3)


@pytest.mark.parametrize("name", ["mixed", "bits"])
def test_sample_factorised_draws_from_the_table(name):
    torch.manual_seed(0)
    layout = make_layout(LAYOUTS[name])
    grid = CandidateGrid(layout, window=WINDOW)
    num = 40000
    codes = Target(layout).states()[5:6].expand(num, -1)
    linear = torch.randn(1, grid.relaxed_dim).expand(num, -1)
    log_q, base = grid.logits(linear, torch.full((num,), 0.8), codes)
    draws = sample_factorised(log_q, base)
    slots = draws - base
    for i in range(layout.num_coords):
        freq = torch.bincount(slots[:, i], minlength=grid.num_slots).float() / num
        probs = log_q[0, i].exp()
        se = (probs * (1 - probs) / num).sqrt().clamp(min=1e-12)
        assert ((freq - probs).abs() / se).max() < 4.5
        assert (freq[probs == 0] == 0).all()


def _log_q_matrix(target, states, linear_fn, curvature, layout):
    """``[S, S]``: log q(states[b] | states[a]) from the independent joint normalisation."""
    index = {tuple(x): b for b, x in enumerate(states.tolist())}
    out = torch.full((len(states), len(states)), -math.inf)
    for a in range(len(states)):
        x = states[a]
        joint, log_q = true_log_q(
            target, x, linear_fn(x.unsqueeze(0))[0], curvature, candidate_sets(layout, x)
        )
        for y, lq in zip(joint.tolist(), log_q.tolist()):
            if tuple(y) in index:
                out[a, index[tuple(y)]] = lq
    return out


def _assert_balance(log_p, log_q, log_ratio_fn):
    """p(x) q(x'|x) a(x->x') = p(x') q(x|x') a(x'->x) for every pair of states with a
    possible move, ``log_ratio_fn(a, b)`` the library's log ratio of the moves from
    ``states[a]`` to ``states[b]`` (batched over pairs)."""
    a, b = torch.triu_indices(len(log_p), len(log_p), offset=1)
    possible = torch.isfinite(log_q[a, b]) | torch.isfinite(log_q[b, a])
    a, b = a[possible], b[possible]
    forward = log_p[a] + log_q[a, b] + accept_probability(log_ratio_fn(a, b)).log()
    backward = log_p[b] + log_q[b, a] + accept_probability(log_ratio_fn(b, a)).log()
    assert torch.equal(torch.isfinite(forward), torch.isfinite(backward))
    finite = torch.isfinite(forward)
    assert torch.allclose(forward[finite], backward[finite], atol=1e-4)
    return int(finite.sum())


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_ncg_detailed_balance_over_every_pair(name):
    """q from the independent joint normalisation; the acceptance from the library's
    ``ncg_log_ratio`` (the ratio ``ncg_step`` uses). The target is -inf above
    ``FINITE_CAP`` on unbounded coordinates; moves there are rejected."""
    layout = make_layout(LAYOUTS[name])
    target = Target(layout)
    grid = CandidateGrid(layout, window=WINDOW)
    eps = 0.8
    states = target.states()
    f, grad = target.value_and_grad(states)

    def linear(x):
        return 0.5 * flat_grad(target, target.value_and_grad(x)[1]) + target.embed(x) / eps

    log_q = _log_q_matrix(target, states, linear, 1 / eps, layout)

    def log_ratio(a, b):
        state = GradientState(states[a], f[a], grad[a], torch.full((len(a),), eps))
        return ncg_log_ratio(state, states[b], f[b], grad[b], grid)

    assert _assert_balance(f, log_q, log_ratio) > 20


@pytest.mark.parametrize("kind", [None, "random"])
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_auxiliary_detailed_balance_for_a_fixed_z(name, kind):
    """For fixed z, the x-move of (P)AVG is reversible for pi(x | z) ~ e^f N(z; A phi(x), I):
    pi(x|z) q(x'|z,x) a = pi(x'|z) q(x|z,x') a'. q is the independent joint
    normalisation; a uses ``auxiliary_log_ratio`` with xi = z - A phi(x)."""
    torch.manual_seed(1)
    layout = make_layout(LAYOUTS[name])
    target = Target(layout)
    grid = CandidateGrid(layout, window=WINDOW)
    matrix = _matrix(target, kind)
    step_size = 0.9
    root, shift = _root(target, step_size, matrix)
    states = target.states()
    f, grad = target.value_and_grad(states)
    phi = target.embed(states)
    for _ in range(2):
        z = torch.randn(1, grid.relaxed_dim) + phi[:1] @ root.T
        log_pi = f - 0.5 * (z - phi @ root.T).pow(2).sum(-1)  # log pi(x, z)

        def linear(x, z=z):
            m_phi = target.embed(x) @ matrix.T if matrix is not None else 0.0
            return flat_grad(target, target.value_and_grad(x)[1]) - m_phi + z @ root.T

        log_q = _log_q_matrix(target, states, linear, shift, layout)

        def log_ratio(a, b, z=z):
            num = len(a)
            precond = None if matrix is None else preconditioner(matrix, num)
            state = GradientState(states[a], f[a], grad[a], torch.full((num,), step_size))
            noise = z - phi[a] @ root.T
            return auxiliary_log_ratio(state, states[b], f[b], grad[b], noise, grid, precond)

        assert _assert_balance(log_pi, log_q, log_ratio) > 20


def test_pavg_with_the_exact_hessian_accepts_every_proposal():
    """A log-quadratic target with M its Hessian: PAVG is block Gibbs, acceptance 1."""
    torch.manual_seed(2)
    layout = make_layout(LAYOUTS["bits"])
    target = Target(layout, quadratic=1.0)
    grid = CandidateGrid(layout)
    precond = preconditioner(target.a, 64)
    state = pavg_init(
        target.states()[:1].expand(64, -1), target.value_and_grad, torch.full((64,), 0.5), precond
    )
    changed = 0
    for _ in range(30):
        state, info = pavg_step(state, target.value_and_grad, grid)
        assert torch.allclose(info.accept_prob, torch.ones(64), atol=1e-4)
        changed += int(info.num_changed.sum())
    assert changed > 0


def test_ncg_step_carries_a_consistent_state():
    torch.manual_seed(3)
    layout = make_layout(LAYOUTS["mixed"])
    target = Target(layout)
    grid = CandidateGrid(layout, window=WINDOW)
    state = ncg_init(target.states()[:1].expand(16, -1), target.value_and_grad, torch.ones(16))
    for _ in range(20):
        state, info = ncg_step(state, target.value_and_grad, grid)
        f, grad = target.value_and_grad(state.codes)
        assert torch.allclose(state.log_joint, f) and torch.allclose(state.grad, grad)
        assert (state.codes[:, -1] <= FINITE_CAP).all()
        assert torch.equal(info.step_size, torch.ones(16))
        assert ((info.accept_prob >= 0) & (info.accept_prob <= 1)).all()


@pytest.mark.parametrize("kind", ["precision", "covariance"])
def test_fit_preconditioner_recovers_a_quadratic(kind):
    """f = -x^T H x / 2 with H the precision (or the covariance) of the draws: the fit
    picks that matrix with scale -1 and a zero residual."""
    torch.manual_seed(4)
    dim = 5
    a = torch.randn(dim, dim, dtype=torch.float64)
    cov = a @ a.T / dim + 0.5 * torch.eye(dim, dtype=torch.float64)
    states = torch.distributions.MultivariateNormal(
        torch.zeros(dim, dtype=torch.float64), cov
    ).sample((300, 4))
    flat = states.flatten(0, 1)
    emp_cov = torch.cov(flat.T)
    h = torch.linalg.inv(emp_cov) if kind == "precision" else emp_cov
    log_joints = -0.5 * ((states @ h) * states).sum(-1)
    grads = -(states @ h)
    fit = fit_preconditioner(states.float(), grads.float(), log_joints.float())
    assert fit.kind == kind
    assert fit.scale == pytest.approx(-1.0, rel=1e-3)
    assert torch.allclose(fit.matrix.double(), -h, atol=1e-3 * float(h.abs().max()))
    assert fit.losses[kind] < 1e-3 * min(v for k, v in fit.losses.items() if k != kind)


def test_fit_preconditioner_masks_and_needs_moves():
    layout = make_layout(LAYOUTS["categoricals"])
    grid = CandidateGrid(layout)
    mask = grid.block_mask()
    assert not mask[0, 1] and mask[0, 0] and mask[0, 3]
    torch.manual_seed(0)
    codes = torch.randint(0, 2, (50, 4, 3))
    states = grid.embed(codes.flatten(0, 1)).reshape(50, 4, -1)
    fit = fit_preconditioner(states, torch.randn_like(states), torch.randn(50, 4), mask)
    assert (fit.matrix[~mask] == 0).all()
    still = states[:1].expand(10, -1, -1)
    assert fit_preconditioner(still, torch.randn_like(still), torch.zeros(10, 4)) is None

"""Models ported from Pyro's and NumPyro's examples and tutorials, for the exactness tests.

The point of these models is that *other people* wrote them: the model bodies are kept
as close to the originals as possible (names, comments and shape idioms included), so
that the kernels meet models as users write them, not as this package would like them
to be written. Every model's docstring names its source file and lists every edit made
to it, and why. Edits that are not in the model body are listed too: the continuous
parameters are held fixed at sensible values by :func:`pyro.poutine.condition` (or
passed as arguments), so that the posterior of the discrete sites is exactly enumerable
on a small data set; the discrete sites that the originals sum out by enumeration
(``infer={"enumerate": "parallel"}`` or ``@config_enumerate``) are *sampled* by the
kernels, which :func:`pyro_gwg.enumeration.lift_enumeration` arranges without touching the
model body.

:data:`CASES` holds ``name -> Case(model, args, bounds)`` with the model as the kernels
receive it (conditioned, enumeration marks lifted); the raw functions below are the
ported originals. Code layout (line breaks) follows ``ruff format``, which this
repository enforces; no token of a ported body was changed unless its docstring says
so.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import config_enumerate
from pyro.ops.indexing import Vindex
from pyro.util import ignore_jit_warnings

from pyro_gwg.enumeration import lift_enumeration

__all__ = ["CASES", "Case"]


# =====================================================================================
# pyro-ppl/pyro examples/hmm.py
#
# The five functions below are model_0 .. model_4 of examples/hmm.py, verbatim (the
# file's imports: torch, pyro, dist, poutine, Vindex, ignore_jit_warnings). Common
# edits, all outside the bodies:
#   * probs_x / probs_y (/ probs_w) are fixed by poutine.condition (HMM_PARAMS);
#     with include_prior=True (the default) the conditioned Dirichlet/Beta sites add
#     a constant to the log joint.
#   * the x_t (/ w_t) sites, marked infer={"enumerate": "parallel"} in the body, are
#     sampled: lift_enumeration lifts the marks.
#   * ``args`` is a SimpleNamespace(hidden_dim=..., jit=False) instead of argparse;
#     the data are a tiny hand-written binary data set instead of JSB chorales.
# =====================================================================================


def hmm_model_0(sequences, lengths, args, batch_size=None, include_prior=True):
    """pyro examples/hmm.py ``model_0``: HMM with a *sequential* ``pyro.plate`` over
    sequences (one site per sequence and time step, ``x_{i}_{t}``), ``x = 0`` (a Python
    int) before the first step, and ``assert not torch._C._get_tracing_state()``.

    Edits: none in the body (see the common edits above).
    """
    assert not torch._C._get_tracing_state()
    num_sequences, max_length, data_dim = sequences.shape
    with poutine.mask(mask=include_prior):
        # Our prior on transition probabilities will be:
        # stay in the same state with 90% probability; uniformly jump to another
        # state with 10% probability.
        probs_x = pyro.sample(
            "probs_x",
            dist.Dirichlet(0.9 * torch.eye(args.hidden_dim) + 0.1).to_event(1),
        )
        # We put a weak prior on the conditional probability of a tone sounding.
        # We know that on average about 4 of 88 tones are active, so we'll set a
        # rough weak prior of 10% of the notes being active at any one time.
        probs_y = pyro.sample(
            "probs_y",
            dist.Beta(0.1, 0.9).expand([args.hidden_dim, data_dim]).to_event(2),
        )
    # In this first model we'll sequentially iterate over sequences in a
    # minibatch; this will make it easy to reason about tensor shapes.
    tones_plate = pyro.plate("tones", data_dim, dim=-1)
    for i in pyro.plate("sequences", len(sequences), batch_size):
        length = lengths[i]
        sequence = sequences[i, :length]
        x = 0
        for t in pyro.markov(range(length)):
            # On the next line, we'll overwrite the value of x with an updated
            # value. If we wanted to record all x values, we could instead
            # write x[t] = pyro.sample(...x[t-1]...).
            x = pyro.sample(
                "x_{}_{}".format(i, t),
                dist.Categorical(probs_x[x]),
                infer={"enumerate": "parallel"},
            )
            with tones_plate:
                pyro.sample(
                    "y_{}_{}".format(i, t),
                    dist.Bernoulli(probs_y[x.squeeze(-1)]),
                    obs=sequence[t],
                )


def hmm_model_1(sequences, lengths, args, batch_size=None, include_prior=True):
    """pyro examples/hmm.py ``model_1``: the plain HMM, vectorised over sequences
    (``pyro.plate("sequences", dim=-2)``), ``poutine.mask`` for sequences shorter than
    the longest, ``pyro.markov`` over time, ``x = 0`` before the first step.

    Edits: none in the body (see the common edits above).
    """
    # Sometimes it is safe to ignore jit warnings. Here we use the
    # pyro.util.ignore_jit_warnings context manager to silence warnings about
    # conversion to integer, since we know all three numbers will be the same
    # across all invocations to the model.
    with ignore_jit_warnings():
        num_sequences, max_length, data_dim = map(int, sequences.shape)
        assert lengths.shape == (num_sequences,)
        assert lengths.max() <= max_length
    with poutine.mask(mask=include_prior):
        probs_x = pyro.sample(
            "probs_x",
            dist.Dirichlet(0.9 * torch.eye(args.hidden_dim) + 0.1).to_event(1),
        )
        probs_y = pyro.sample(
            "probs_y",
            dist.Beta(0.1, 0.9).expand([args.hidden_dim, data_dim]).to_event(2),
        )
    tones_plate = pyro.plate("tones", data_dim, dim=-1)
    # We subsample batch_size items out of num_sequences items. Note that since
    # we're using dim=-1 for the notes plate, we need to batch over a different
    # dimension, here dim=-2.
    with pyro.plate("sequences", num_sequences, batch_size, dim=-2) as batch:
        lengths = lengths[batch]
        x = 0
        # If we are not using the jit, then we can vary the program structure
        # each call by running for a dynamically determined number of time
        # steps, lengths.max(). However if we are using the jit, then we try to
        # keep a single program structure for all minibatches; the fixed
        # structure ends up being faster since each program structure would
        # need to trigger a new jit compile stage.
        for t in pyro.markov(range(max_length if args.jit else lengths.max())):
            with poutine.mask(mask=(t < lengths).unsqueeze(-1)):
                x = pyro.sample(
                    "x_{}".format(t),
                    dist.Categorical(probs_x[x]),
                    infer={"enumerate": "parallel"},
                )
                with tones_plate:
                    pyro.sample(
                        "y_{}".format(t),
                        dist.Bernoulli(probs_y[x.squeeze(-1)]),
                        obs=sequences[batch, t],
                    )


def hmm_model_2(sequences, lengths, args, batch_size=None, include_prior=True):
    """pyro examples/hmm.py ``model_2``: the autoregressive HMM ("arHMM"), where
    ``y[t]`` depends on ``x[t]`` and ``y[t-1]`` through ``probs_y[x, y, tones]``.

    Edits: none in the body (see the common edits above).
    """
    with ignore_jit_warnings():
        num_sequences, max_length, data_dim = map(int, sequences.shape)
        assert lengths.shape == (num_sequences,)
        assert lengths.max() <= max_length
    with poutine.mask(mask=include_prior):
        probs_x = pyro.sample(
            "probs_x",
            dist.Dirichlet(0.9 * torch.eye(args.hidden_dim) + 0.1).to_event(1),
        )
        probs_y = pyro.sample(
            "probs_y",
            dist.Beta(0.1, 0.9).expand([args.hidden_dim, 2, data_dim]).to_event(3),
        )
    tones_plate = pyro.plate("tones", data_dim, dim=-1)
    with pyro.plate("sequences", num_sequences, batch_size, dim=-2) as batch:
        lengths = lengths[batch]
        x, y = 0, 0
        for t in pyro.markov(range(max_length if args.jit else lengths.max())):
            with poutine.mask(mask=(t < lengths).unsqueeze(-1)):
                x = pyro.sample(
                    "x_{}".format(t),
                    dist.Categorical(probs_x[x]),
                    infer={"enumerate": "parallel"},
                )
                # Note the broadcasting tricks here: to index probs_y on tensors x and y,
                # we also need a final tensor for the tones dimension. This is conveniently
                # provided by the plate associated with that dimension.
                with tones_plate as tones:
                    y = pyro.sample(
                        "y_{}".format(t),
                        dist.Bernoulli(probs_y[x, y, tones]),
                        obs=sequences[batch, t],
                    ).long()


def hmm_model_3(sequences, lengths, args, batch_size=None, include_prior=True):
    """pyro examples/hmm.py ``model_3``: the factorial HMM ("FHMM") with two hidden
    chains ``w`` and ``x`` of ``int(hidden_dim ** 0.5)`` states each.

    Edits: none in the body (see the common edits above).
    """
    with ignore_jit_warnings():
        num_sequences, max_length, data_dim = map(int, sequences.shape)
        assert lengths.shape == (num_sequences,)
        assert lengths.max() <= max_length
    hidden_dim = int(args.hidden_dim**0.5)  # split between w and x
    with poutine.mask(mask=include_prior):
        probs_w = pyro.sample(
            "probs_w", dist.Dirichlet(0.9 * torch.eye(hidden_dim) + 0.1).to_event(1)
        )
        probs_x = pyro.sample(
            "probs_x", dist.Dirichlet(0.9 * torch.eye(hidden_dim) + 0.1).to_event(1)
        )
        probs_y = pyro.sample(
            "probs_y",
            dist.Beta(0.1, 0.9).expand([hidden_dim, hidden_dim, data_dim]).to_event(3),
        )
    tones_plate = pyro.plate("tones", data_dim, dim=-1)
    with pyro.plate("sequences", num_sequences, batch_size, dim=-2) as batch:
        lengths = lengths[batch]
        w, x = 0, 0
        for t in pyro.markov(range(max_length if args.jit else lengths.max())):
            with poutine.mask(mask=(t < lengths).unsqueeze(-1)):
                w = pyro.sample(
                    "w_{}".format(t),
                    dist.Categorical(probs_w[w]),
                    infer={"enumerate": "parallel"},
                )
                x = pyro.sample(
                    "x_{}".format(t),
                    dist.Categorical(probs_x[x]),
                    infer={"enumerate": "parallel"},
                )
                with tones_plate as tones:
                    pyro.sample(
                        "y_{}".format(t),
                        dist.Bernoulli(probs_y[w, x, tones]),
                        obs=sequences[batch, t],
                    )


def hmm_model_4(sequences, lengths, args, batch_size=None, include_prior=True):
    """pyro examples/hmm.py ``model_4``: the partially factorial HMM ("PFHMM", a
    dynamic Bayesian network): ``x[t]`` depends on ``w[t]`` and ``x[t-1]`` through
    ``Vindex(probs_x)[w, x]``; ``w = x = torch.tensor(0)`` before the first step.

    Edits: none in the body (see the common edits above).
    """
    with ignore_jit_warnings():
        num_sequences, max_length, data_dim = map(int, sequences.shape)
        assert lengths.shape == (num_sequences,)
        assert lengths.max() <= max_length
    hidden_dim = int(args.hidden_dim**0.5)  # split between w and x
    with poutine.mask(mask=include_prior):
        probs_w = pyro.sample(
            "probs_w", dist.Dirichlet(0.9 * torch.eye(hidden_dim) + 0.1).to_event(1)
        )
        probs_x = pyro.sample(
            "probs_x",
            dist.Dirichlet(0.9 * torch.eye(hidden_dim) + 0.1).expand_by([hidden_dim]).to_event(2),
        )
        probs_y = pyro.sample(
            "probs_y",
            dist.Beta(0.1, 0.9).expand([hidden_dim, hidden_dim, data_dim]).to_event(3),
        )
    tones_plate = pyro.plate("tones", data_dim, dim=-1)
    with pyro.plate("sequences", num_sequences, batch_size, dim=-2) as batch:
        lengths = lengths[batch]
        # Note the broadcasting tricks here: we declare a hidden torch.arange and
        # ensure that w and x are always tensors so we can unsqueeze them below,
        # thus ensuring that the x sample sites have correct distribution shape.
        w = x = torch.tensor(0, dtype=torch.long)
        for t in pyro.markov(range(max_length if args.jit else lengths.max())):
            with poutine.mask(mask=(t < lengths).unsqueeze(-1)):
                w = pyro.sample(
                    "w_{}".format(t),
                    dist.Categorical(probs_w[w]),
                    infer={"enumerate": "parallel"},
                )
                x = pyro.sample(
                    "x_{}".format(t),
                    dist.Categorical(Vindex(probs_x)[w, x]),
                    infer={"enumerate": "parallel"},
                )
                with tones_plate as tones:
                    pyro.sample(
                        "y_{}".format(t),
                        dist.Bernoulli(probs_y[w, x, tones]),
                        obs=sequences[batch, t],
                    )


# two short binary sequences of two tones; the second is one step shorter (masked)
HMM_SEQUENCES = torch.tensor(
    [
        [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0]],
        [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]],
    ]
)
PROBS_X_3 = torch.tensor([[0.7, 0.2, 0.1], [0.15, 0.7, 0.15], [0.1, 0.25, 0.65]])
PROBS_Y_3 = torch.tensor([[0.85, 0.15], [0.2, 0.75], [0.6, 0.55]])
PROBS_X_2 = torch.tensor([[0.75, 0.25], [0.3, 0.7]])
PROBS_W_2 = torch.tensor([[0.8, 0.2], [0.35, 0.65]])
PROBS_Y_2x2 = torch.tensor(
    [[[0.9, 0.1], [0.3, 0.7]], [[0.6, 0.5], [0.15, 0.85]]]
)  # [hidden, hidden, tones]: probs_y[x, y_prev, tone] for model_2, probs_y[w, x, tone] for 3, 4
PROBS_X_2x2 = torch.tensor([[[0.8, 0.2], [0.3, 0.7]], [[0.5, 0.5], [0.1, 0.9]]])  # [w, x_prev, x]

HMM_PARAMS = {
    "model_0": {"probs_x": PROBS_X_3, "probs_y": PROBS_Y_3},
    "model_1": {"probs_x": PROBS_X_3, "probs_y": PROBS_Y_3},
    "model_2": {"probs_x": PROBS_X_2, "probs_y": PROBS_Y_2x2},
    "model_3": {"probs_w": PROBS_W_2, "probs_x": PROBS_X_2, "probs_y": PROBS_Y_2x2},
    "model_4": {"probs_w": PROBS_W_2, "probs_x": PROBS_X_2x2, "probs_y": PROBS_Y_2x2},
}


# =====================================================================================
# pyro-ppl/pyro examples/capture_recapture/cjs.py
# =====================================================================================


def cjs_model_1(capture_history, sex):
    """pyro examples/capture_recapture/cjs.py ``model_1``: the Cormack-Jolly-Seber model
    with constant survival ``phi`` and recapture ``rho`` (both ``Uniform(0, 1)``); the
    alive states ``z_t`` follow a Markov chain inside ``pyro.plate("animals")``.

    A quirk of the original, kept: ``poutine.mask(mask=first_capture_mask)`` records the
    tensor itself, which ``first_capture_mask |= ...`` then updates in place, so every
    site's recorded mask is the *final* one (all animals captured: nothing is masked)
    once log-probabilities are computed after the run, as Pyro's ELBOs and HMC (and
    pyro-gwg) do. Before its first capture an animal's ``z_t`` is then pinned to 1 by
    ``Bernoulli(1.0)``, whose clamped probability gives ``z_t = 0`` a log-probability
    of about -16 (not -inf). Pyro's NUTS and pyro-gwg see the same density.

    Edits: none in the body. Outside it: ``phi``/``rho`` fixed by ``poutine.condition``
    for the exactness tests (left latent for the MixedGibbs test); the ``z_t`` sites,
    marked ``infer={"enumerate": "parallel"}``, are sampled (``lift_enumeration``); a
    3-animal, 4-occasion capture history instead of the dipper data.
    """
    N, T = capture_history.shape
    phi = pyro.sample("phi", dist.Uniform(0.0, 1.0))  # survival probability
    rho = pyro.sample("rho", dist.Uniform(0.0, 1.0))  # recapture probability

    with pyro.plate("animals", N, dim=-1):
        z = torch.ones(N)
        # we use this mask to eliminate extraneous log probabilities
        # that arise for a given individual before its first capture.
        first_capture_mask = torch.zeros(N).bool()
        for t in pyro.markov(range(T)):
            with poutine.mask(mask=first_capture_mask):
                mu_z_t = first_capture_mask.float() * phi * z + (1 - first_capture_mask.float())
                # we use parallel enumeration to exactly sum out
                # the discrete states z_t.
                z = pyro.sample(
                    "z_{}".format(t), dist.Bernoulli(mu_z_t), infer={"enumerate": "parallel"}
                )
                mu_y_t = rho * z
                pyro.sample("y_{}".format(t), dist.Bernoulli(mu_y_t), obs=capture_history[:, t])
            first_capture_mask |= capture_history[:, t].bool()


def cjs_model_2(capture_history, sex):
    """pyro examples/capture_recapture/cjs.py ``model_2``: time-varying survival
    ``phi_t`` (sampled *outside* the animals plate, one per occasion ``t > 0``); the plate
    is built once and re-entered at every time step.

    Edits: none in the body (the in-place mask update of ``model_1`` is here too).
    Outside it: ``rho`` and ``phi_1 .. phi_{T-1}`` fixed by ``poutine.condition``; the
    ``z_t`` sites are sampled (``lift_enumeration``); the same small capture history as
    ``model_1``.
    """
    N, T = capture_history.shape
    rho = pyro.sample("rho", dist.Uniform(0.0, 1.0))  # recapture probability

    z = torch.ones(N)
    first_capture_mask = torch.zeros(N).bool()
    # we create the plate once, outside of the loop over t
    animals_plate = pyro.plate("animals", N, dim=-1)
    for t in pyro.markov(range(T)):
        # note that phi_t needs to be outside the plate, since
        # phi_t is shared across all N individuals
        phi_t = pyro.sample("phi_{}".format(t), dist.Uniform(0.0, 1.0)) if t > 0 else 1.0
        with animals_plate, poutine.mask(mask=first_capture_mask):
            mu_z_t = first_capture_mask.float() * phi_t * z + (1 - first_capture_mask.float())
            # we use parallel enumeration to exactly sum out
            # the discrete states z_t.
            z = pyro.sample(
                "z_{}".format(t), dist.Bernoulli(mu_z_t), infer={"enumerate": "parallel"}
            )
            mu_y_t = rho * z
            pyro.sample("y_{}".format(t), dist.Bernoulli(mu_y_t), obs=capture_history[:, t])
        first_capture_mask |= capture_history[:, t].bool()


CAPTURE_HISTORY = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
CJS_1_PARAMS = {"phi": torch.tensor(0.7), "rho": torch.tensor(0.6)}
CJS_2_PARAMS = {
    "rho": torch.tensor(0.6),
    "phi_1": torch.tensor(0.8),
    "phi_2": torch.tensor(0.6),
    "phi_3": torch.tensor(0.7),
}


# =====================================================================================
# pyro-ppl/numpyro examples/annotation.py, translated to Pyro
#
# Translations, one for one: numpyro.plate -> pyro.plate, numpyro.sample ->
# pyro.sample, numpyro.distributions -> pyro.distributions (same class names and
# arguments), numpyro.contrib.indexing.Vindex -> pyro.ops.indexing.Vindex,
# jnp.ones(n) -> torch.ones(n), jnp.full(n, 10) -> torch.full((n,), 10.0) (torch
# wants a size tuple and a float fill for a float tensor), jnp.where -> torch.where,
# jax.nn.one_hot(c, n) -> torch.nn.functional.one_hot(c, n), np.max -> torch.max
# (the data are torch tensors).
# =====================================================================================


def get_annotation_data():
    """numpyro examples/annotation.py ``get_data`` (Table 1 of Dawid & Skene 1979): the
    annotator of each of 7 positions and the classes given to 45 items, zero-based.
    Translation: np.array -> torch.tensor."""
    # NB: the first annotator assessed each item 3 times
    positions = torch.tensor([1, 1, 1, 2, 3, 4, 5])
    annotations = torch.tensor(
        [
            [1, 1, 1, 1, 1, 1, 1],
            [3, 3, 3, 4, 3, 3, 4],
            [1, 1, 2, 2, 1, 2, 2],
            [2, 2, 2, 3, 1, 2, 1],
            [2, 2, 2, 3, 2, 2, 2],
            [2, 2, 2, 3, 3, 2, 2],
            [1, 2, 2, 2, 1, 1, 1],
            [3, 3, 3, 3, 4, 3, 3],
            [2, 2, 2, 2, 2, 2, 3],
            [2, 3, 2, 2, 2, 2, 3],
            [4, 4, 4, 4, 4, 4, 4],
            [2, 2, 2, 3, 3, 4, 3],
            [1, 1, 1, 1, 1, 1, 1],
            [2, 2, 2, 3, 2, 1, 2],
            [1, 2, 1, 1, 1, 1, 1],
            [1, 1, 1, 2, 1, 1, 1],
            [1, 1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 1, 1, 1],
            [2, 2, 2, 2, 2, 2, 1],
            [2, 2, 2, 1, 3, 2, 2],
            [2, 2, 2, 2, 2, 2, 2],
            [2, 2, 2, 2, 2, 2, 1],
            [2, 2, 2, 3, 2, 2, 2],
            [2, 2, 1, 2, 2, 2, 2],
            [1, 1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 1, 1, 1],
            [2, 3, 2, 2, 2, 2, 2],
            [1, 1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 1, 1, 1],
            [1, 1, 2, 1, 1, 2, 1],
            [1, 1, 1, 1, 1, 1, 1],
            [3, 3, 3, 3, 2, 3, 3],
            [1, 1, 1, 1, 1, 1, 1],
            [2, 2, 2, 2, 2, 2, 2],
            [2, 2, 2, 3, 2, 3, 2],
            [4, 3, 3, 4, 3, 4, 3],
            [2, 2, 1, 2, 2, 3, 2],
            [2, 3, 2, 3, 2, 3, 3],
            [3, 3, 3, 3, 4, 3, 2],
            [1, 1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 1, 1, 1],
            [1, 2, 1, 2, 1, 1, 1],
            [2, 3, 2, 2, 2, 2, 2],
            [1, 2, 1, 1, 1, 1, 1],
            [2, 2, 2, 2, 2, 2, 2],
        ]
    )
    # we minus 1 because in Python, the first index is 0
    return positions - 1, annotations - 1


def dawid_skene(positions, annotations):
    """numpyro examples/annotation.py ``dawid_skene`` (Figure 2 of Paun et al. 2018): one
    confusion matrix ``beta`` per annotator, item classes ``c ~ Categorical(pi)`` in
    ``plate("item", dim=-2)``, observed labels ``Vindex(beta)[positions, c, :]``.

    Edits: the numpyro -> pyro translations listed above (``np.max`` -> ``torch.max``);
    nothing else in the body. Outside it: ``beta`` and ``pi`` fixed by
    ``poutine.condition``; the first 5 of the 45 items (4^5 = 1024 joint states of
    ``c``). NumPyro's NUTS enumerates ``c`` automatically; here it is sampled, with no
    mark to lift.
    """
    num_annotators = int(torch.max(positions)) + 1
    num_classes = int(torch.max(annotations)) + 1
    num_items, num_positions = annotations.shape

    with pyro.plate("annotator", num_annotators, dim=-2):
        with pyro.plate("class", num_classes):
            beta = pyro.sample("beta", dist.Dirichlet(torch.ones(num_classes)))

    pi = pyro.sample("pi", dist.Dirichlet(torch.ones(num_classes)))

    with pyro.plate("item", num_items, dim=-2):
        c = pyro.sample("c", dist.Categorical(pi))

        # here we use Vindex to allow broadcasting for the second index `c`
        # ref: http://num.pyro.ai/en/latest/utilities.html#numpyro.contrib.indexing.vindex
        with pyro.plate("position", num_positions):
            pyro.sample("y", dist.Categorical(Vindex(beta)[positions, c, :]), obs=annotations)


def mace(positions, annotations):
    """numpyro examples/annotation.py ``mace`` (Figure 3 of Paun et al. 2018): item
    classes ``c`` (uniform, via constant logits) and per-annotation spamming indicators
    ``s ~ Bernoulli(1 - theta[positions])`` in ``plate("position")``; a label equals
    ``c`` when ``s == 0`` (``torch.where`` on a one-hot row: other labels have
    probability 0, which torch's ``Categorical`` clamps to its float epsilon, so such
    joint states have a log density about 16 per violation below the others, not
    -inf).

    Edits: the numpyro -> pyro translations listed above (``jnp.full`` ->
    ``torch.full``, ``jnp.where`` -> ``torch.where``, ``nn.one_hot`` ->
    ``torch.nn.functional.one_hot``, ``np.max`` -> ``torch.max``); nothing else in
    the body. Outside it: ``epsilon`` and ``theta`` fixed by ``poutine.condition``;
    items 1 and 3 and positions 0, 3, 4, 5 (annotators 0-3) of the data, so
    (4 * 2^4)^2 = 4096 joint states of ``(c, s)``.
    """
    num_annotators = int(torch.max(positions)) + 1
    num_classes = int(torch.max(annotations)) + 1
    num_items, num_positions = annotations.shape

    with pyro.plate("annotator", num_annotators):
        epsilon = pyro.sample("epsilon", dist.Dirichlet(torch.full((num_classes,), 10.0)))
        theta = pyro.sample("theta", dist.Beta(0.5, 0.5))

    with pyro.plate("item", num_items, dim=-2):
        # NB: using constant logits for discrete uniform prior
        # (NumPyro does not have DiscreteUniform distribution yet)
        c = pyro.sample("c", dist.Categorical(logits=torch.zeros(num_classes)))

        with pyro.plate("position", num_positions):
            s = pyro.sample("s", dist.Bernoulli(1 - theta[positions]))
            probs = torch.where(
                s[..., None] == 0,
                torch.nn.functional.one_hot(c, num_classes),
                epsilon[positions],
            )
            pyro.sample("y", dist.Categorical(probs), obs=annotations)


_POSITIONS, _ANNOTATIONS = get_annotation_data()
DS_DATA = (_POSITIONS, _ANNOTATIONS[:5])
MACE_COLUMNS = torch.tensor([0, 3, 4, 5])
MACE_DATA = (_POSITIONS[MACE_COLUMNS], _ANNOTATIONS[[1, 3]][:, MACE_COLUMNS])  # annotators 0-3


def _confusion(num_annotators, num_classes, accuracy):
    """``[A, K, K]``: annotator ``a`` labels class ``k`` correctly with ``accuracy[a]``,
    else uniformly among the other classes."""
    acc = torch.as_tensor(accuracy).reshape(num_annotators, 1, 1)
    eye = torch.eye(num_classes)
    return acc * eye + (1 - acc) * (1 - eye) / (num_classes - 1)


DS_PARAMS = {
    "beta": _confusion(5, 4, [0.45, 0.4, 0.35, 0.45, 0.35]),
    "pi": torch.tensor([0.3, 0.35, 0.2, 0.15]),
}
MACE_PARAMS = {
    "epsilon": torch.tensor(
        [
            [0.3, 0.3, 0.25, 0.15],
            [0.25, 0.25, 0.25, 0.25],
            [0.2, 0.4, 0.3, 0.1],
            [0.4, 0.2, 0.2, 0.2],
        ]
    ),
    "theta": torch.tensor([0.7, 0.5, 0.6, 0.4]),
}


# =====================================================================================
# Coal-mining disasters change point: pymc-devs/pymc pymc3/examples/disaster_model.py
# (the PyMC getting-started case study; NumPyro and TFP tutorials use the same model)
# =====================================================================================

# Time series of recorded coal mining disasters in the UK from 1851 to 1962
DISASTERS_DATA = torch.tensor(
    [4, 5, 4, 0, 1, 4, 3, 4, 0, 6, 3, 3, 4, 0, 2, 6,
     3, 3, 5, 4, 5, 3, 1, 4, 4, 1, 5, 5, 3, 4, 2, 5,
     2, 2, 3, 4, 2, 1, 3, 2, 2, 1, 1, 1, 1, 3, 0, 0,
     1, 0, 1, 1, 0, 0, 3, 1, 0, 3, 2, 2, 0, 1, 1, 1,
     0, 1, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 1, 1, 0, 2,
     3, 3, 1, 1, 2, 1, 1, 1, 1, 2, 4, 2, 0, 0, 1, 4,
     0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1],
    dtype=torch.get_default_dtype(),
)  # fmt: skip


def disaster_model(disasters_data):
    """The coal-mining disaster change point, PyMC3 ``pymc3/examples/disaster_model.py``::

        switchpoint = DiscreteUniform('switchpoint', lower=0, upper=years)
        early_mean = Exponential('early_mean', lam=1.)
        late_mean = Exponential('late_mean', lam=1.)
        idx = arange(years)
        rate = switch(switchpoint >= idx, early_mean, late_mean)
        disasters = Poisson('disasters', rate, observed=disasters_data)

    Translation to Pyro: ``DiscreteUniform(0, years)`` -> ``Categorical(logits=
    torch.zeros(years + 1))`` (Pyro has no DiscreteUniform; the same device NumPyro's
    annotation example uses), ``Exponential(lam=1.)`` -> ``Exponential(1.0)``,
    ``arange`` -> ``torch.arange``, ``switch`` -> ``torch.where``; the observed
    vector is one sample site with batch shape ``[years]`` and no ``pyro.plate``, as
    PyMC writes it. Outside the body: ``early_mean``/``late_mean`` fixed by
    ``poutine.condition`` for the exactness tests (112 states of ``switchpoint``),
    latent for the MixedGibbs test.
    """
    years = len(disasters_data)
    # Prior for distribution of switchpoint location
    switchpoint = pyro.sample("switchpoint", dist.Categorical(logits=torch.zeros(years + 1)))
    # Priors for pre- and post-switch mean number of disasters
    early_mean = pyro.sample("early_mean", dist.Exponential(1.0))
    late_mean = pyro.sample("late_mean", dist.Exponential(1.0))
    # Allocate appropriate Poisson rates to years before and after current
    # switchpoint location
    idx = torch.arange(years)
    rate = torch.where(switchpoint >= idx, early_mean, late_mean)
    # Data likelihood
    pyro.sample("disasters", dist.Poisson(rate), obs=disasters_data)


DISASTER_PARAMS = {"early_mean": torch.tensor(3.0), "late_mean": torch.tensor(1.0)}


def disaster_model_plated(disasters_data):
    """:func:`disaster_model` with its observations in ``pyro.plate("years")``: the
    *reference* for Pyro's NUTS, whose enumeration of ``switchpoint``
    (``config_enumerate``) fails on the unplated batch dimension of the original ("Error
    while packing tensors at site 'disasters'"). The same density; not given to the
    pyro-gwg kernels, which get the PyMC-shaped original.
    """
    years = len(disasters_data)
    switchpoint = pyro.sample("switchpoint", dist.Categorical(logits=torch.zeros(years + 1)))
    early_mean = pyro.sample("early_mean", dist.Exponential(1.0))
    late_mean = pyro.sample("late_mean", dist.Exponential(1.0))
    idx = torch.arange(years)
    rate = torch.where(switchpoint >= idx, early_mean, late_mean)
    with pyro.plate("years", years):
        pyro.sample("disasters", dist.Poisson(rate), obs=disasters_data)


# =====================================================================================
# pyro-ppl/pyro tutorial/source/gmm.ipynb (Gaussian Mixture Model)
# =====================================================================================

K = 2  # Fixed number of components.


@config_enumerate
def gmm_model(data):
    """pyro tutorial/source/gmm.ipynb ``model``: two components with Dirichlet weights,
    a shared LogNormal scale, Normal locations in ``plate("components")`` and
    Categorical assignments used as indices, ``locs[assignment]``.

    Edits: none in the body; the ``@config_enumerate`` decorator is kept (Pyro's NUTS
    reference sums the assignments out through it) and lifted by ``lift_enumeration``
    for the kernels. Outside it: ``weights``, ``scale`` and ``locs`` fixed by
    ``poutine.condition`` for the exactness tests (2^5 assignments of the tutorial's
    5 points), latent for the MixedGibbs test.
    """
    # Global variables.
    weights = pyro.sample("weights", dist.Dirichlet(0.5 * torch.ones(K)))
    scale = pyro.sample("scale", dist.LogNormal(0.0, 2.0))
    with pyro.plate("components", K):
        locs = pyro.sample("locs", dist.Normal(0.0, 10.0))

    with pyro.plate("data", len(data)):
        # Local variables.
        assignment = pyro.sample("assignment", dist.Categorical(weights))
        pyro.sample("obs", dist.Normal(locs[assignment], scale), obs=data)


GMM_DATA = torch.tensor([0.0, 1.0, 10.0, 11.0, 12.0])
GMM_PARAMS = {
    "weights": torch.tensor([0.45, 0.55]),
    "scale": torch.tensor(4.0),
    "locs": torch.tensor([2.0, 9.0]),
}


# =====================================================================================
# The "Asia" (chest clinic) Bayesian network, Lauritzen & Spiegelhalter (1988), with
# the conditional probability tables of the bnlearn repository, written the way the
# Pyro introduction writes discrete models: Bernoulli sites whose probabilities are
# looked up in CPT tensors by the parents' values.
# =====================================================================================

P_TUB = torch.tensor([0.01, 0.05])  # P(tub | asia)
P_LUNG = torch.tensor([0.01, 0.1])  # P(lung | smoke)
P_BRONC = torch.tensor([0.3, 0.6])  # P(bronc | smoke)
P_XRAY = torch.tensor([0.05, 0.98])  # P(xray | either)
P_DYSP = torch.tensor([[0.1, 0.8], [0.7, 0.9]])  # P(dysp | either, bronc)


def asia(xray, dysp):
    """Asia network: ``asia -> tub``, ``smoke -> lung, bronc``, ``either = tub or lung``
    (a logical node: a deterministic ``torch.max``), ``either -> xray``,
    ``(either, bronc) -> dysp``; evidence on ``xray`` and ``dysp`` (2^5 = 32 joint
    states). Parents index the CPTs with ``.long()``, which cuts the gradient paths
    from a node to its children: the gradient-informed proposals see only each
    node's own prior term.

    Edits: not ported from a Pyro file (no example in pyro/numpyro); the CPTs are
    bnlearn's ``asia``. The ``either`` node, a 0/1 CPT in bnlearn, is the deterministic
    OR it encodes (a sampled 0/1 CPT node would make single-site samplers unable to
    move ``tub``/``lung`` at all).
    """
    a = pyro.sample("asia", dist.Bernoulli(0.01))
    smoke = pyro.sample("smoke", dist.Bernoulli(0.5))
    tub = pyro.sample("tub", dist.Bernoulli(P_TUB[a.long()]))
    lung = pyro.sample("lung", dist.Bernoulli(P_LUNG[smoke.long()]))
    bronc = pyro.sample("bronc", dist.Bernoulli(P_BRONC[smoke.long()]))
    either = torch.max(tub, lung)
    pyro.sample("xray", dist.Bernoulli(P_XRAY[either.long()]), obs=xray)
    pyro.sample("dysp", dist.Bernoulli(P_DYSP[either.long(), bronc.long()]), obs=dysp)


# =====================================================================================
# The cases as the kernels receive them
# =====================================================================================


class Case(NamedTuple):
    model: Callable
    args: Tuple
    bounds: Optional[Dict[str, Tuple[int, int]]] = None


def _hmm_args(hidden_dim, num_sequences, lengths):
    sequences = HMM_SEQUENCES[:num_sequences, : max(lengths)]
    return (
        sequences,
        torch.tensor(lengths),
        SimpleNamespace(hidden_dim=hidden_dim, jit=False),
    )


CASES: Dict[str, Case] = {
    # 7 sites of 3 states: 3^7 = 2187 joint states
    "hmm_model_0": Case(
        lift_enumeration(poutine.condition(hmm_model_0, data=HMM_PARAMS["model_0"])),
        _hmm_args(3, 2, [4, 3]),
    ),
    # 4 sites of 2 x 3 states (the last of sequence 1 masked): 3^8 = 6561
    "hmm_model_1": Case(
        lift_enumeration(poutine.condition(hmm_model_1, data=HMM_PARAMS["model_1"])),
        _hmm_args(3, 2, [4, 3]),
    ),
    # 5 sites of 2 x 2 states: 2^10 = 1024
    "hmm_model_2": Case(
        lift_enumeration(poutine.condition(hmm_model_2, data=HMM_PARAMS["model_2"])),
        _hmm_args(2, 2, [5, 4]),
    ),
    # w and x, 5 steps of one sequence, 2 + 2 states: 2^10 = 1024
    "hmm_model_3": Case(
        lift_enumeration(poutine.condition(hmm_model_3, data=HMM_PARAMS["model_3"])),
        _hmm_args(4, 1, [5]),
    ),
    # as model_3, x depending on w: 2^10 = 1024
    "hmm_model_4": Case(
        lift_enumeration(poutine.condition(hmm_model_4, data=HMM_PARAMS["model_4"])),
        _hmm_args(4, 1, [5]),
    ),
    # 4 occasions x 3 animals: 2^12 = 4096
    "cjs_model_1": Case(
        lift_enumeration(poutine.condition(cjs_model_1, data=CJS_1_PARAMS)),
        (CAPTURE_HISTORY, None),
    ),
    "cjs_model_2": Case(
        lift_enumeration(poutine.condition(cjs_model_2, data=CJS_2_PARAMS)),
        (CAPTURE_HISTORY, None),
    ),
    # 5 items x 4 classes: 1024
    "dawid_skene": Case(poutine.condition(dawid_skene, data=DS_PARAMS), DS_DATA),
    # 2 items x (4 classes x 2^4 spam bits): 4096
    "mace": Case(poutine.condition(mace, data=MACE_PARAMS), MACE_DATA),
    # 112 switch points
    "disaster": Case(poutine.condition(disaster_model, data=DISASTER_PARAMS), (DISASTERS_DATA,)),
    # 2^5 assignments
    "gmm": Case(lift_enumeration(poutine.condition(gmm_model, data=GMM_PARAMS)), (GMM_DATA,)),
    # 2^5 network states
    "asia": Case(asia, (torch.tensor(1.0), torch.tensor(1.0))),
}

"""Pure, batched tensor functions: proposal logits, sampling, log q, MH acceptance."""

from pyro_gwg.proposals.gwg import (
    GWGInfo,
    GWGMove,
    GWGState,
    apply_move,
    coordinate_log_probs,
    defensive_mixture,
    distinct_counts,
    distinct_draws,
    gwg_init,
    gwg_proposal,
    gwg_step,
    inverse_cdf_draws,
    log_mass_left,
    move_log_prob,
    proposal_logits,
    sample_move,
    sequential_log_probs,
)
from pyro_gwg.proposals.layout import CoordinateLayout
from pyro_gwg.proposals.mh import accept_probability, metropolis_hastings, select

__all__ = [
    "CoordinateLayout",
    "GWGInfo",
    "GWGMove",
    "GWGState",
    "apply_move",
    "accept_probability",
    "coordinate_log_probs",
    "defensive_mixture",
    "distinct_counts",
    "distinct_draws",
    "gwg_init",
    "gwg_proposal",
    "gwg_step",
    "inverse_cdf_draws",
    "log_mass_left",
    "metropolis_hastings",
    "move_log_prob",
    "proposal_logits",
    "sample_move",
    "select",
    "sequential_log_probs",
]

"""Auto: the move of every latent site chosen from the model (:mod:`.plan`), the
kernel that runs the plan (:mod:`.kernel`), independent exact draws for models
whose latent sites can all be summed out (:mod:`.exact`) and a sweep of kernels over
groups of sites (:mod:`.sweep`)."""

from pyro_gwg.auto.exact import ExactDraws
from pyro_gwg.auto.kernel import Auto
from pyro_gwg.auto.plan import Plan, SitePlan, make_plan
from pyro_gwg.auto.sweep import Sweep

__all__ = ["Auto", "ExactDraws", "Plan", "SitePlan", "Sweep", "make_plan"]

"""Auto: the move of every latent site chosen from the model (:mod:`.plan`), the
kernel that runs the plan (:mod:`.kernel`) and independent exact draws for models
whose latent sites can all be summed out (:mod:`.exact`)."""

from pyro_gwg.auto.exact import ExactDraws
from pyro_gwg.auto.kernel import Auto
from pyro_gwg.auto.plan import Plan, SitePlan, make_plan

__all__ = ["Auto", "ExactDraws", "Plan", "SitePlan", "make_plan"]

"""Initial states: drawn from the init strategy, the most probable of a few per
chain, checked (a finite log density, a deterministic model, fixed sites nearby)."""

from __future__ import annotations

import math
from typing import Optional

import torch

from pyro_gwg import _trace
from pyro_gwg.bridge.batching import CHAIN_PLATE
from pyro_gwg.bridge.errors import out_of_memory

__all__ = ["INIT_CANDIDATES", "InitialStates"]

#: states drawn from the init strategy per chain, of which the chain starts at the most
#: probable (see :meth:`InitialStates.initial_codes`)
INIT_CANDIDATES = 10


class InitialStates:
    """The initial states of :class:`~pyro_gwg.bridge.density.ModelDensity` (a part
    of it: it runs the energy's model and evaluates it)."""

    def initial_codes(self, num_chains: int = 1) -> torch.Tensor:
        """Initial states from ``init_strategy`` with a finite log joint, checked (see
        :meth:`check_initial`).

        :data:`INIT_CANDIDATES` states are drawn per chain and each chain starts at the
        most probable of its own: ``init_to_sample`` draws from the prior, which ignores
        the data, and a prior draw that the data all but rule out (a state of posterior
        probability :math:`10^{-6}` whose density is finite only because a distribution
        clamps a zero probability) can hold a chain for thousands of steps. The draws
        are made in one batched run of the model where the strategy allows it;
        strategies that give unbatched values, and chains without a finite candidate,
        fall back to one run per draw (a strategy that gives the same state twice, such
        as ``init_to_value``, is asked once per chain).

        :param int num_chains: number of chains ``C``.
        :returns: long ``[C, D]``.
        :raises ValueError: naming the sites with a non-finite log-probability when no
            valid state is found in ``max_init_tries`` attempts per chain.
        """
        per_chain = INIT_CANDIDATES
        candidates = self._batched_initial_codes(num_chains * per_chain)
        if candidates is None:
            first = self._single_initial_codes()
            second = self._single_initial_codes()
            per_chain = 1 if torch.equal(first, second) else per_chain
            more = [self._single_initial_codes() for _ in range(num_chains * per_chain - 2)]
            candidates = torch.cat([first, second, *more])[: num_chains * per_chain]
        self.check_deterministic(candidates[:1])
        # (a single chain evaluates its candidates one by one: it may never need batches)
        batched = num_chains > 1 or self.batching is not None
        log_joint = self._unchecked_log_joint(candidates, batched).reshape(per_chain, num_chains)
        best = torch.where(torch.isnan(log_joint), -math.inf, log_joint).argmax(0)
        chains = torch.arange(num_chains, device=candidates.device)
        codes = candidates.reshape(per_chain, num_chains, -1)[best, chains]
        for c in (~torch.isfinite(log_joint[best, chains])).nonzero().reshape(-1).tolist():
            codes[c] = self._single_initial_codes()[0]
        self.check_initial(codes)
        return codes

    def _unchecked_log_joint(
        self, codes: torch.Tensor, batched: bool = True, chains: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        with self.recording():
            return self.log_joint(codes, batched, chains=chains)

    def _batched_initial_codes(self, num_chains: int) -> Optional[torch.Tensor]:
        plated = _trace.in_batch_plate(
            self._model(num_states=num_chains), CHAIN_PLATE, num_chains, self.max_plate_nesting
        )
        try:
            trace = _trace.trace_model(
                plated, self.model_args, self.model_kwargs, init_strategy=self.init_strategy
            )
            values = {
                s.name: trace.nodes[s.name]["value"].reshape((num_chains,) + s.value_shape)
                for s in self.sites
            }
        except Exception as error:  # the model does not broadcast: one run per chain
            if out_of_memory(error):
                raise
            return None
        return self.codes_from_values(values, "Initial value")

    def _single_initial_codes(self) -> torch.Tensor:
        previous = None
        for _ in range(self.max_init_tries):
            trace = self._prototype_trace()
            values = {n: site["value"] for n, site in trace.nodes.items() if n in self._names}
            self._check_signature(trace, values, num_chains=1)
            codes = self.codes_from_values(
                {s.name: trace.nodes[s.name]["value"].unsqueeze(0) for s in self.sites},
                "Initial value",
            )
            self.check_deterministic(codes)
            if torch.isfinite(self._unchecked_log_joint(codes)).all():
                break
            if previous is not None and torch.equal(previous, codes):
                break  # a deterministic strategy gives the same state again
            previous = codes
        return codes

    def check_initial(self, codes: torch.Tensor) -> None:
        """Check initial states: a finite log joint in every chain, the same log joint
        when evaluated twice (no randomness outside ``pyro.sample``), and, for a model
        whose control flow reads latent values, the same latent sites at the states
        next to the first one.

        :param torch.Tensor codes: long ``[C, D]`` states (already checked against the
            supports by :meth:`codes_from_values`).
        :raises ValueError: naming the sites with a non-finite log-probability.
        :raises UnsupportedModelError: for a random model or one whose latent sites
            change with latent values.
        """
        self.check_deterministic(codes[:1])
        if self.value_reads:
            self._probe_structure(codes[:1])
        log_joint = self._unchecked_log_joint(codes)
        for c in range(codes.shape[0]):
            if torch.isfinite(log_joint[c]):
                continue
            with self.given_of_chain(c):
                terms = self.site_log_probs(codes[c : c + 1])
            bad = [
                "'{}' ({:g})".format(k, float(v)) for k, v in terms.items() if not torch.isfinite(v)
            ]
            raise ValueError(
                "The log density at the initial state is {:g}{}. The sites with a "
                "non-finite log-probability: {}. Pass an init_strategy (e.g. "
                "pyro.infer.autoguide.init_to_value(values={{...}})) or initial_params "
                "with a state the model supports.".format(
                    float(log_joint[c]),
                    " (chain {})".format(c) if codes.shape[0] > 1 else "",
                    ", ".join(bad) or "none individually (check pyro.factor terms)",
                )
            )

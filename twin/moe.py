"""The MoE training job of the twin: expert popularity that drifts and jumps, and per-phase traffic.

One training step is ``layers`` MoE layers, forward only; each layer is::

    attention compute │ dispatch all-to-all │ expert compute │ combine all-to-all │ next layer …
                        tokens → expert GPUs                   results back (transpose)

Expert popularity follows reference/fabric_model.md §3.2:

* a latent z per (layer, expert), AR(1) across steps: z ← ρ·z + √(1−ρ²)·σ·ε;
* layers correlated (an exchangeable shared component with correlation ``layer_corr``, so the same
  expert tends to be hot in every layer — Lina's cross-layer correlation — and a hot port survives
  a coarse poll);
* one *hot expert* per regime gets ``hot_boost`` added to its latent (e^1.5 ≈ 4.5× popularity,
  the reference's max/mean); with probability ``regime_shift_prob`` per step a regime shift
  resamples z and moves the hot expert elsewhere (data-domain change): the hotspot jumps.

Experts map to GPUs contiguously (``experts_per_gpu`` each). The dispatch matrix is bytes(s→d) =
tokens that rank s routes to experts on d × hidden × bytes/elem; combine is its transpose (at the
combine element size). Everything here is numpy and seeded: same seed, same job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

PhaseKind = Literal["dispatch", "combine"]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class MoeConfig:
    """Knobs of the simulated MoE job (defaults: DeepSeek-V3-like bytes, moderate skew)."""

    layers: int = 8
    experts_per_gpu: int = 1
    top_k: int = 8
    tokens_per_rank: int = 4096
    hidden: int = 7168
    dispatch_bytes_per_elem: int = 1  # FP8 dispatch
    combine_bytes_per_elem: int = 2  # BF16 combine
    sigma: float = 0.3  # latent std: background skew (Gini ≈ erf(σ/2))
    rho: float = 0.95  # AR(1) per step: slow drift of popularity
    layer_corr: float = 0.7  # correlation of latents across layers
    hot_boost: float = 1.5  # added to the hot expert's latent: e^1.5 ≈ 4.5× popularity
    regime_shift_prob: float = 0.05  # per step: hot expert jumps
    gate_noise: float = 0.05  # relative per-(source, expert) noise of token counts
    attention_ms: float = 3.0  # compute before dispatch
    expert_ms: float = 5.0  # expert FFN compute between dispatch and combine
    step_gap_ms: float = 40.0  # backward pass + optimizer (no traffic modelled yet)
    # A cycle of skewed and balanced stretches (0 balanced steps = always skewed): the balanced
    # steps route uniformly (σ = 0, no hot expert), the ground truth "no incast here" a soak run
    # checks detection against; each skewed stretch starts a new regime (the hotspot moved).
    skewed_steps: int = 0
    balanced_steps: int = 0

    def __post_init__(self) -> None:
        if self.layers < 1 or self.experts_per_gpu < 1 or self.top_k < 1 or self.tokens_per_rank < 1:
            raise ValueError("layers, experts_per_gpu, top_k and tokens_per_rank must be ≥ 1")
        if not (0.0 <= self.rho <= 1.0 and 0.0 <= self.layer_corr <= 1.0):
            raise ValueError("rho and layer_corr must be in [0, 1]")
        if not 0.0 <= self.regime_shift_prob <= 1.0:
            raise ValueError("regime_shift_prob must be in [0, 1]")
        if min(self.skewed_steps, self.balanced_steps) < 0 or (self.balanced_steps and not self.skewed_steps):
            raise ValueError("skewed_steps and balanced_steps must be ≥ 0 (skewed_steps ≥ 1 in a cycle)")

    def balanced_at(self, step: int) -> bool:
        """Whether ``step`` falls in a balanced stretch of the skewed/balanced cycle."""
        if not self.balanced_steps:
            return False
        return step % (self.skewed_steps + self.balanced_steps) >= self.skewed_steps


@dataclass(frozen=True)
class LayerTraffic:
    """One MoE layer of one step: expert popularity and the dispatch GPU×GPU byte matrix."""

    step: int
    layer: int
    popularity: FloatArray  # (E,) sums to 1
    dispatch_bytes: FloatArray  # (N, N): bytes from GPU s (row) to GPU d (column)
    combine_bytes: FloatArray  # (N, N): transpose of dispatch at the combine element size
    hot_expert: int  # −1 in a balanced step


class ExpertPopularity:
    """The latent popularity state (layers × experts), advanced one training step at a time."""

    def __init__(self, cfg: MoeConfig, n_experts: int, rng: np.random.Generator) -> None:
        self.cfg, self.n_experts, self.rng = cfg, n_experts, rng
        self.z = self._stationary()
        self.hot_expert = int(rng.integers(n_experts))
        self.regime = 0

    def _stationary(self) -> FloatArray:
        """Draw z with per-entry std σ and cross-layer correlation ``layer_corr``."""
        c, rng = self.cfg, self.rng
        shared = rng.standard_normal(self.n_experts)
        own = rng.standard_normal((c.layers, self.n_experts))
        return c.sigma * (np.sqrt(c.layer_corr) * shared + np.sqrt(1.0 - c.layer_corr) * own)

    def advance(self) -> None:
        c = self.cfg
        if self.rng.random() < c.regime_shift_prob:
            self.shift()
        else:
            self.z = c.rho * self.z + np.sqrt(1.0 - c.rho**2) * self._stationary()

    def shift(self) -> None:
        """A regime shift: new latents, and the hot expert jumps to a different GPU's expert, so
        the hot *port* moves."""
        self.z = self._stationary()
        jump = int(self.rng.integers(1, self.n_experts)) if self.n_experts > 1 else 0
        self.hot_expert = (self.hot_expert + jump) % self.n_experts
        self.regime += 1

    def probabilities(self) -> FloatArray:
        """(layers, E) popularity: softmax of the latent plus the hot expert's boost."""
        z = self.z.copy()
        z[:, self.hot_expert] += self.cfg.hot_boost
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)


class MoeTraffic:
    """Generates the per-layer traffic of successive training steps for ``n_gpus`` ranks."""

    def __init__(self, cfg: MoeConfig, n_gpus: int, seed: int = 0) -> None:
        if n_gpus < 2:
            raise ValueError("an all-to-all needs at least 2 GPUs")
        self.cfg, self.n_gpus = cfg, n_gpus
        self.n_experts = n_gpus * cfg.experts_per_gpu
        self.rng = np.random.default_rng(seed)
        self.popularity = ExpertPopularity(cfg, self.n_experts, self.rng)
        self.step = 0

    def next_step(self) -> list[LayerTraffic]:
        """Traffic of every layer of the next step, then advance popularity by one step."""
        c, n = self.cfg, self.n_gpus
        balanced = c.balanced_at(self.step)
        probs = (np.full((c.layers, self.n_experts), 1.0 / self.n_experts) if balanced
                 else self.popularity.probabilities())
        hot_expert = -1 if balanced else self.popularity.hot_expert
        tokens = float(c.tokens_per_rank * c.top_k)
        # Gate noise: one draw per step, shifted per layer (cheap; the shape of the noise is all
        # that matters here, not its independence across layers).
        noise = np.clip(1.0 + c.gate_noise * self.rng.standard_normal((n, n)), 0.0, None)
        scale = tokens * c.hidden * c.dispatch_bytes_per_elem
        combine_ratio = c.combine_bytes_per_elem / c.dispatch_bytes_per_elem
        out: list[LayerTraffic] = []
        for layer in range(c.layers):
            p = probs[layer]
            p_gpu = p.reshape(n, c.experts_per_gpu).sum(axis=1)  # popularity of each GPU's experts
            dispatch = noise[(np.arange(n) + layer) % n] * (scale * p_gpu)[None, :]
            np.fill_diagonal(dispatch, 0.0)  # a rank's tokens for its own experts never leave it
            combine = dispatch.T * combine_ratio
            out.append(LayerTraffic(self.step, layer, p, dispatch, combine, hot_expert))
        self.popularity.advance()
        self.step += 1
        if balanced and not c.balanced_at(self.step):
            self.popularity.shift()  # back from a balanced stretch: a new regime, a new hotspot
        return out

    def gpu_of_expert(self, expert: int) -> int:
        """The GPU holding ``expert`` (−1 for −1: no hot expert in a balanced step)."""
        return expert // self.cfg.experts_per_gpu if expert >= 0 else -1

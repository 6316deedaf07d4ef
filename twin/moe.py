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

The all-to-alls run inside **expert-parallel groups** of ``ep_size`` consecutive ranks (DeepSeek-
and Megatron-style EP: each group holds every expert once; the groups are data-parallel replicas
with the same gate, so they share one popularity and differ in their tokens' gate noise)::

    ranks   0 ……… G−1 │ G ……… 2G−1 │ …            the job's traffic matrix is block-diagonal:
    group   ┌───────┐ │             │               one G×G block per group, nothing between
    0       │ G × G │ │             │               groups — kept as a (groups, G, G) array,
            └───────┘ ┌───────────┐ │               never as the n_gpus² matrix (5,632 GPUs
    1                 │   G × G   │ │               would be 32 M cells, 16 per step)
                      └───────────┘ …

Experts map to the GPUs of a group contiguously (``experts_per_gpu`` each). Block g's dispatch
is bytes(s→d) = tokens that rank s routes to experts on d × hidden × bytes/elem; combine is its
transpose (at the combine element size). With one group (``ep_size`` ≥ the GPUs, the demo's 256)
this is exactly the whole-job matrix. Everything here is numpy and seeded: same seed, same job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

PhaseKind = Literal["dispatch", "combine"]
FloatArray = npt.NDArray[np.float64]
# A dense n_gpus × n_gpus view of a step is for small fabrics (tests, offline scenarios): above
# this the job's traffic exists only as its EP blocks (4,096² float64 = 134 MB a matrix).
DENSE_MAX_GPUS = 4096


@dataclass(frozen=True)
class MoeConfig:
    """Knobs of the simulated MoE job (defaults: DeepSeek-V3-like bytes, moderate skew)."""

    layers: int = 8
    ep_size: int = 256  # GPUs per expert-parallel group (0 or ≥ the job's GPUs: one group)
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
        if self.ep_size < 0 or self.ep_size == 1:
            raise ValueError(f"ep_size must be ≥ 2 GPUs (0: every GPU in one group), got {self.ep_size}")
        if not (0.0 <= self.rho <= 1.0 and 0.0 <= self.layer_corr <= 1.0):
            raise ValueError("rho and layer_corr must be in [0, 1]")
        if not 0.0 <= self.regime_shift_prob <= 1.0:
            raise ValueError("regime_shift_prob must be in [0, 1]")
        if min(self.skewed_steps, self.balanced_steps) < 0 or (self.balanced_steps and not self.skewed_steps):
            raise ValueError("skewed_steps and balanced_steps must be ≥ 0 (skewed_steps ≥ 1 in a cycle)")

    def group_gpus(self, n_gpus: int) -> int:
        """GPUs per EP group for a job on ``n_gpus``; a clear error when they do not split evenly."""
        g = n_gpus if not self.ep_size or self.ep_size >= n_gpus else self.ep_size
        if n_gpus % g:
            raise ValueError(f"{n_gpus} GPUs do not split into expert-parallel groups of {g}: choose an "
                             f"ep_size that divides {n_gpus} (or 0: one group of every GPU)")
        return g

    def balanced_at(self, step: int) -> bool:
        """Whether ``step`` falls in a balanced stretch of the skewed/balanced cycle."""
        if not self.balanced_steps:
            return False
        return step % (self.skewed_steps + self.balanced_steps) >= self.skewed_steps


@dataclass(frozen=True)
class LayerTraffic:
    """One MoE layer of one step: expert popularity and its two all-to-alls, per EP group.

    The byte blocks are computed when asked (:meth:`blocks`: fresh (groups, G, G) arrays each
    time) from the step's G × G gate noise, which every layer and group of the step shares —
    rows rotated by the layer plus the group (cheap; the shape of the noise is all that matters
    here, not its independence across layers or groups) — so a step costs one G × G draw
    whatever its size, and a caller holds one layer's blocks at a time. Under PXN only each
    server's sums reach the network: :meth:`server_sums` gives them for every group without
    building the blocks (G² + groups × servers × G per layer, not groups × G²).
    ``dispatch_bytes``/``combine_bytes`` are the dense whole-job matrices, for small fabrics only
    (≤ ``DENSE_MAX_GPUS``).
    """

    step: int
    layer: int
    popularity: FloatArray  # (E,) over one group's experts, sums to 1
    hot_expert: int  # −1 in a balanced step; the same expert in every group
    groups: int
    rank_bytes: FloatArray = field(repr=False)  # (G,) bytes a rank sends each GPU of its group, before noise
    noise: FloatArray = field(repr=False)  # (G, G) the step's gate noise (shared by its layers and groups)
    combine_ratio: float = 2.0
    # (2G + 1, G): prefix sums of the noise's rows, twice over (for server_sums; one per step)
    noise_prefix: FloatArray | None = field(default=None, repr=False)

    @property
    def group_gpus(self) -> int:
        return len(self.rank_bytes)

    def _gate_dispatch(self) -> FloatArray:
        g, k = self.group_gpus, self.groups
        # group j, layer l: row s is the noise's row (s + l + j) mod G (one group: the matrix the
        # whole job always had)
        rows = (np.arange(g)[None, :] + self.layer + np.arange(k)[:, None]) % g
        out = self.noise[rows]
        out *= self.rank_bytes[None, None, :]
        out[:, np.arange(g), np.arange(g)] = 0.0  # a rank's tokens for its own experts never leave it
        return out

    def server_sums(self, per_server: int) -> tuple[FloatArray, FloatArray]:
        """(dispatch, combine) bytes each server of a group sends each GPU of the group, summed
        over the server's ``per_server`` consecutive ranks: (groups · servers, G) each — what PXN
        puts on the wire (a server's senders fold onto one proxy NIC). Equal to summing
        :meth:`blocks` (to rounding), except for a server's bytes to its own GPUs, which never
        leave it (the diagonal is not zeroed here; routing drops same-server pairs)::

            dispatch_j[h, d] = rb[d] · Σ_{s∈h} noise[(s+l+j) % G, d]       prefix sums of rows
            combine_j[h, d]  = ratio · Σ_{s∈h} noise[(d+l+j) % G, s] · rb[s]  one G × servers product
        """
        g, k, m = self.group_gpus, self.groups, per_server
        if g % m:
            raise ValueError(f"{m} GPUs per server do not divide EP groups of {g}")
        h = g // m
        shift = (self.layer + np.arange(k))[:, None]  # (k, 1)
        top = self.noise_prefix if self.noise_prefix is not None else row_prefix(self.noise)
        start = np.arange(h)[None, :] * m + shift % g  # (k, h): first noise row of each server's ranks
        dispatch = (top[start + m] - top[start]) * self.rank_bytes[None, None, :]  # (k, h, G)
        weighted = np.einsum("rhs->rh", (self.noise * self.rank_bytes[None, :]).reshape(g, h, m))  # (G, h)
        rows = (np.arange(g)[None, :] + shift) % g  # (k, G): the noise row of each receiver d
        combine = weighted[rows].transpose(0, 2, 1) * self.combine_ratio  # (k, h, G)
        return dispatch.reshape(k * h, g), np.ascontiguousarray(combine).reshape(k * h, g)

    def blocks(self) -> tuple[FloatArray, FloatArray]:
        """(dispatch, combine), each (groups, G, G): block j row s = bytes rank j·G+s sends to each
        rank of its group; combine is each dispatch block transposed at the combine element size
        (laid out transposed, as numpy makes it: routing sums it in the order the whole-job
        matrix had)."""
        dispatch = self._gate_dispatch()
        return dispatch, dispatch.transpose(0, 2, 1) * self.combine_ratio

    @property
    def dispatch_blocks(self) -> FloatArray:
        return self.blocks()[0]

    @property
    def combine_blocks(self) -> FloatArray:
        return self.blocks()[1]

    @property
    def dispatch_bytes(self) -> FloatArray:
        """(N, N) the whole job's dispatch matrix, block-diagonal (small fabrics only)."""
        return dense_matrix(self.dispatch_blocks)

    @property
    def combine_bytes(self) -> FloatArray:
        """(N, N) the whole job's combine matrix, block-diagonal (small fabrics only)."""
        return dense_matrix(self.combine_blocks)


def row_prefix(noise: FloatArray) -> FloatArray:
    """(2G + 1, G): 0, then the running sums of the noise's rows, the rows taken twice (so any G
    consecutive rows modulo G are a difference of two rows)."""
    g = len(noise)
    top = np.zeros((2 * g + 1, g))
    np.cumsum(np.concatenate([noise, noise]), axis=0, out=top[1:])
    return top


def dense_matrix(blocks: FloatArray) -> FloatArray:
    """(groups, G, G) EP blocks → the block-diagonal (N, N) matrix (N = groups·G ≤ DENSE_MAX_GPUS)."""
    k, g, _ = blocks.shape
    n = k * g
    if n > DENSE_MAX_GPUS:
        raise ValueError(f"a dense {n} x {n} traffic matrix is not built (> {DENSE_MAX_GPUS} GPUs): "
                         f"use the (groups, G, G) blocks")
    if k == 1:
        return blocks[0]
    out = np.zeros((n, n))
    for i in range(k):
        out[i * g:(i + 1) * g, i * g:(i + 1) * g] = blocks[i]
    return out


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
    """Generates the per-layer traffic of successive training steps for ``n_gpus`` ranks in EP
    groups of ``cfg.ep_size`` (:meth:`MoeConfig.group_gpus`)."""

    def __init__(self, cfg: MoeConfig, n_gpus: int, seed: int = 0) -> None:
        if n_gpus < 2:
            raise ValueError("an all-to-all needs at least 2 GPUs")
        self.cfg, self.n_gpus = cfg, n_gpus
        self.group_gpus = cfg.group_gpus(n_gpus)
        self.groups = n_gpus // self.group_gpus
        self.n_experts = self.group_gpus * cfg.experts_per_gpu  # every group holds each expert once
        self.rng = np.random.default_rng(seed)
        self.popularity = ExpertPopularity(cfg, self.n_experts, self.rng)
        self.step = 0

    def next_step(self) -> list[LayerTraffic]:
        """Traffic of every layer of the next step, then advance popularity by one step."""
        c, g = self.cfg, self.group_gpus
        balanced = c.balanced_at(self.step)
        probs = (np.full((c.layers, self.n_experts), 1.0 / self.n_experts) if balanced
                 else self.popularity.probabilities())
        hot_expert = -1 if balanced else self.popularity.hot_expert
        tokens = float(c.tokens_per_rank * c.top_k)
        # Gate noise: one G x G draw per step (one group: the draw the whole-job matrix had)
        noise = np.clip(1.0 + c.gate_noise * self.rng.standard_normal((g, g)), 0.0, None)
        scale = tokens * c.hidden * c.dispatch_bytes_per_elem
        combine_ratio = c.combine_bytes_per_elem / c.dispatch_bytes_per_elem
        prefix = row_prefix(noise) if self.groups > 1 else None  # PXN routes many groups from it
        out: list[LayerTraffic] = []
        for layer in range(c.layers):
            p = probs[layer]
            p_gpu = p.reshape(g, c.experts_per_gpu).sum(axis=1)  # popularity of each GPU's experts
            out.append(LayerTraffic(self.step, layer, p, hot_expert, self.groups, scale * p_gpu, noise,
                                    combine_ratio, prefix))
        self.popularity.advance()
        self.step += 1
        if balanced and not c.balanced_at(self.step):
            self.popularity.shift()  # back from a balanced stretch: a new regime, a new hotspot
        return out

    def gpu_of_expert(self, expert: int) -> int:
        """The GPU of group 0 holding ``expert`` (−1 for −1: no hot expert in a balanced step);
        group g's is ``g·group_gpus`` further (:meth:`gpus_of_expert`)."""
        return expert // self.cfg.experts_per_gpu if expert >= 0 else -1

    def gpus_of_expert(self, expert: int) -> list[int]:
        """The GPU holding ``expert`` in every EP group ([] for −1)."""
        local = self.gpu_of_expert(expert)
        return [] if local < 0 else [k * self.group_gpus + local for k in range(self.groups)]

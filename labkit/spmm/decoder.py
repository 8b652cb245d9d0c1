"""An OPT-style decoder whose linear layers are swappable: dense bf16 torch or Tiled-CSL SpMM.

Each block is OPT's: pre-LayerNorm, Q/K/V projections, causal attention over a KV cache,
attention-out projection, pre-LayerNorm, MLP up (fc1, ReLU), MLP down (fc2). The six linear
layers hold 12 * d^2 of the block's weights; they are what Flash-LLM prunes and runs with its
SpMM. Embedding, LayerNorms, attention and the LM head stay dense fp32 (they are small).

Weights are random (seeded) and pruned to the requested unstructured sparsity; the dense and
the sparse model are built from the *same* pruned weights, so they compute the same function
and differ only in how the linear layers read their weights.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass

import torch

from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.spmm.baselines import DenseTorch, TiledCSLMatmul
from labkit.spmm.kernels_cpu import KERNELS
from labkit.spmm.prune import check_sparsity, random_sparse

LINEAR_KINDS = ("dense", "sparse")
LINEARS = ("q", "k", "v", "out", "fc1", "fc2")


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of the model (OPT-66B: d_model 9216, 72 heads, ffn 36864, 64 layers)."""

    d_model: int = 256
    n_heads: int = 4
    ffn_dim: int = 1024
    n_layers: int = 2
    vocab: int = 512
    max_len: int = 128

    def __post_init__(self) -> None:
        for f in ("d_model", "n_heads", "ffn_dim", "n_layers", "vocab", "max_len"):
            v = getattr(self, f)
            # Sizes become tensor shapes: a float (even 16.0) or a bool is refused, not carried along.
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise bad_value(f, v, "an integer >= 1 (int or numpy integer; not a float or bool)")
            object.__setattr__(self, f, int(v))  # np.int64(16) -> 16
        if self.d_model % self.n_heads:
            raise bad_value("n_heads", self.n_heads, f"a divisor of d_model={self.d_model}")


def check_token_ids(prompt: torch.Tensor, vocab: int) -> torch.Tensor:
    """Return `prompt` if it is an integer tensor of token ids in [0, vocab), else raise ValueError.

    (A negative id would silently index the embedding from the end; one >= vocab would fail deep
    inside torch.) The check is one vectorised pass over the prompt.
    """
    if prompt.dtype.is_floating_point or prompt.dtype.is_complex or prompt.dtype == torch.bool:
        raise bad_value("prompt.dtype", prompt.dtype, "an integer dtype (token ids), e.g. torch.long")
    bad = ((prompt < 0) | (prompt >= vocab)).nonzero()
    if len(bad):
        idx = tuple(int(i) for i in bad[0])
        raise bad_value(f"prompt[{idx[0]}, {idx[1]}]", int(prompt[idx]), f"a token id in [0, {vocab})")
    return prompt


def _shapes(cfg: DecoderConfig) -> dict[str, tuple[int, int]]:
    """The (out, in) shape of each linear layer of a block."""
    d, f = cfg.d_model, cfg.ffn_dim
    return {"q": (d, d), "k": (d, d), "v": (d, d), "out": (d, d), "fc1": (f, d), "fc2": (d, f)}


def check_weights(weights) -> dict:
    """Return `weights` if it has the structure :func:`random_weights` returns, else raise naming the part.

    (A missing layer or a wrong shape would otherwise fail deep inside the first generated token.)
    """
    if not isinstance(weights, dict) or not isinstance(weights.get("config"), DecoderConfig):
        raise bad_value("weights", type(weights).__name__, "a dict from random_weights() "
                        "(with 'config': DecoderConfig, 'layers', 'embed', 'pos')")
    cfg = weights["config"]
    layers = weights.get("layers")
    if not isinstance(layers, (list, tuple)) or len(layers) != cfg.n_layers:
        raise bad_value("weights['layers']", type(layers).__name__, f"a list of n_layers={cfg.n_layers} dicts")
    parts = [("weights['embed']", weights.get("embed"), (cfg.vocab, cfg.d_model)),
             ("weights['pos']", weights.get("pos"), (cfg.max_len, cfg.d_model))]
    for i, lw in enumerate(layers):
        if not isinstance(lw, dict):
            raise bad_value(f"weights['layers'][{i}]", type(lw).__name__, "a dict of linear weights and biases")
        for name, shp in _shapes(cfg).items():
            parts.append((f"weights['layers'][{i}]['{name}']", lw.get(name), shp))
            parts.append((f"weights['layers'][{i}]['{name}_bias']", lw.get(name + "_bias"), (shp[0],)))
    for arg, t, shp in parts:
        if (not isinstance(t, torch.Tensor) or tuple(t.shape) != shp or not t.dtype.is_floating_point
                or t.device.type != "cpu"):
            shown = f"{t.dtype}{tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise bad_value(arg, shown, f"a floating CPU tensor of shape {shp}")
    return weights


def random_weights(cfg: DecoderConfig, sparsity: float, *, seed: int = 0) -> dict:
    """Return seeded decoder weights; the six linear layers of every block pruned to `sparsity`."""
    if not isinstance(cfg, DecoderConfig):
        raise bad_value("cfg", type(cfg).__name__, "a DecoderConfig")
    check_sparsity(sparsity)
    seed = check_seed(seed, bits=64)
    g = torch.Generator().manual_seed(seed)
    d = cfg.d_model
    shapes = _shapes(cfg)
    layers = []
    for i in range(cfg.n_layers):
        lw = {}
        for j, (name, shp) in enumerate(shapes.items()):
            lw[name] = random_sparse(shp, sparsity, seed=seed * 1000 + i * 10 + j)
            lw[name + "_bias"] = torch.randn(shp[0], generator=g) * 0.01
        layers.append(lw)
    emb = torch.randn(cfg.vocab, d, generator=g) / math.sqrt(d)
    pos = torch.randn(cfg.max_len, d, generator=g) * 0.01
    return {"config": cfg, "sparsity": sparsity, "layers": layers, "embed": emb, "pos": pos}


class Decoder:
    """Greedy autoregressive generation with a KV cache; linear layers dense or Tiled-CSL."""

    def __init__(self, weights: dict, *, linear: str = "sparse", kernel: str = "auto",
                 dense_call: str = "matmul", dense_dtype: torch.dtype = torch.bfloat16) -> None:
        """`linear` picks dense or Tiled-CSL layers; `dense_call` the torch call dense layers
        make ("matmul": matrix-vector at batch 1, "linear": F.linear's GEMM) and `dense_dtype`
        their weights' type (bf16, Tiled-CSL's value type; fp32 is what a CPU without native
        bf16 matmul runs faster once the batch passes 1)."""
        check_choice("linear", linear, LINEAR_KINDS)
        check_choice("kernel", kernel, KERNELS)
        check_choice("dense_call", dense_call, ("matmul", "linear"))
        check_choice("dense_dtype", dense_dtype, (torch.bfloat16, torch.float32))
        if linear != "dense" and dense_dtype != torch.bfloat16:
            raise bad_value("dense_dtype", dense_dtype, "torch.bfloat16 (the default) unless linear='dense' "
                            "(Tiled-CSL layers hold bf16 values)")
        self.cfg: DecoderConfig = check_weights(weights)["config"]
        self.linear = linear
        self.embed, self.pos = weights["embed"], weights["pos"]
        self.layers = []
        for lw in weights["layers"]:
            ops = {}
            for name in LINEARS:
                w = lw[name]
                ops[name] = (DenseTorch(w, dense_dtype, call=dense_call) if linear == "dense"
                             else TiledCSLMatmul(w, kernel=kernel))
                ops[name + "_bias"] = lw[name + "_bias"]
            self.layers.append(ops)

    @property
    def linear_bytes(self) -> int:
        """Bytes the linear layers' weights occupy (what one generated token must read)."""
        return sum(layer[n].nbytes for layer in self.layers for n in LINEARS)

    @staticmethod
    def _apply(op, bias: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        # h is (B, K); the operators take activations as (K,) or (K, N) and return (M,) / (M, N)
        y = op(h[0])[None, :] if h.shape[0] == 1 else op(h.T.contiguous()).T
        return y.float() + bias

    def step(self, tokens: torch.Tensor, cache: list, t: int) -> torch.Tensor:
        """Run one token per sequence at position `t` through the model; return logits (B, vocab)."""
        cfg = self.cfg
        b = tokens.shape[0]
        nh, dh = cfg.n_heads, cfg.d_model // cfg.n_heads
        h = self.embed[tokens] + self.pos[t]
        for layer, kv in zip(self.layers, cache):
            x = torch.nn.functional.layer_norm(h, (cfg.d_model,))
            q = self._apply(layer["q"], layer["q_bias"], x).view(b, nh, 1, dh)
            kv[0][:, :, t] = self._apply(layer["k"], layer["k_bias"], x).view(b, nh, dh)
            kv[1][:, :, t] = self._apply(layer["v"], layer["v_bias"], x).view(b, nh, dh)
            att = torch.nn.functional.scaled_dot_product_attention(q, kv[0][:, :, :t + 1], kv[1][:, :, :t + 1])
            h = h + self._apply(layer["out"], layer["out_bias"], att.reshape(b, cfg.d_model))
            x = torch.nn.functional.layer_norm(h, (cfg.d_model,))
            u = torch.relu(self._apply(layer["fc1"], layer["fc1_bias"], x))
            h = h + self._apply(layer["fc2"], layer["fc2_bias"], u)
        h = torch.nn.functional.layer_norm(h, (cfg.d_model,))
        return h @ self.embed.T

    def new_cache(self, batch: int) -> list:
        cfg = self.cfg
        dh = cfg.d_model // cfg.n_heads
        return [(torch.zeros(batch, cfg.n_heads, cfg.max_len, dh), torch.zeros(batch, cfg.n_heads, cfg.max_len, dh))
                for _ in self.layers]

    @torch.inference_mode()
    def generate(self, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Return prompt (B, P) extended greedily by `new_tokens` tokens: (B, P + new_tokens)."""
        if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
            raise bad_value("prompt", getattr(prompt, "shape", prompt), "a (batch, length>=1) tensor of token ids")
        check_range("batch", prompt.shape[0], 1, 64, integer=True)
        p, max_len = prompt.shape[1], self.cfg.max_len
        if p >= max_len:
            raise bad_value("prompt.shape[1]", p, f"a prompt length < max_len={max_len} "
                            "(this prompt leaves no room for a new token)")
        try:
            new_tokens = int(check_range("new_tokens", new_tokens, 1, max_len - p, integer=True))
        except ValueError:
            raise bad_value("new_tokens", new_tokens, f"an integer in [1, {max_len - p}] "
                            f"(max_len={max_len} minus the prompt length {p})") from None
        check_token_ids(prompt, self.cfg.vocab)
        out = [prompt[:, i] for i in range(prompt.shape[1])]
        cache = self.new_cache(prompt.shape[0])
        logits = None
        for t in range(prompt.shape[1]):  # prefill token by token (decode is what we measure)
            logits = self.step(prompt[:, t], cache, t)
        for t in range(prompt.shape[1], prompt.shape[1] + new_tokens):
            nxt = logits.argmax(dim=-1)
            out.append(nxt)
            if t + 1 < prompt.shape[1] + new_tokens:
                logits = self.step(nxt, cache, t)
        return torch.stack(out, dim=1)


def tokens_per_second(model: Decoder, batch: int, new_tokens: int, *, seed: int = 0) -> float:
    """Return generated tokens per second (batch * new_tokens / wall time) for one generate call."""
    if not isinstance(model, Decoder):
        raise bad_value("model", type(model).__name__, "a Decoder")
    batch = int(check_range("batch", batch, 1, 64, integer=True))
    seed = check_seed(seed, bits=64)  # new_tokens is checked by generate (against max_len)
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab, (batch, 1), generator=g)
    t0 = time.perf_counter()
    model.generate(prompt, new_tokens)
    return batch * new_tokens / (time.perf_counter() - t0)

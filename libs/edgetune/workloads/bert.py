"""A BERT-style encoder with a masked-LM head (Devlin et al. 2019), in plain torch.

Post-LayerNorm transformer encoder: token + position + segment embeddings, ``num_layers``
blocks of multi-head self-attention and a GELU feed-forward, then the MLM head (dense →
GELU → LayerNorm → decoder tied to the token embedding). ``BertConfig()`` is bert-base
(12 layers, 768 hidden, 12 heads, ≈ 110 M parameters; the encoder is ≈ 11.2 GMACs per
128-token sequence). Attention products go through :class:`~edgetune.workloads.flops.MatMul`
so the FLOP counter sees them.
Input (B, T) token ids; output (B, T, vocab) logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from edgetune.errors import InvalidArgument
from edgetune.workloads.flops import MatMul


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522  # WordPiece, uncased
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_positions: int = 512
    type_vocab_size: int = 2
    seq_len: int = 128  # tokens per sample
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    mask_prob: float = 0.15  # fraction of positions the MLM task masks


# google's bert-tiny shape (2 layers, 128 hidden, 2 heads)
TINY = BertConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512)


class SelfAttention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.heads = c.num_heads
        self.head_dim = c.hidden_size // c.num_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)
        self.scores = MatMul()  # Q·Kᵀ
        self.context = MatMul()  # softmax(·)·V
        self.drop = nn.Dropout(c.dropout)
        self.out = nn.Linear(c.hidden_size, c.hidden_size)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H) → (B, heads, T, head_dim)
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        attn = self.scores(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        ctx = self.context(self.drop(attn.softmax(-1)), v)
        b, _, t, _ = ctx.shape
        return self.out(ctx.transpose(1, 2).reshape(b, t, -1))


class EncoderLayer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(c)
        self.norm1 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.ffn_in = nn.Linear(c.hidden_size, c.intermediate_size)
        self.ffn_out = nn.Linear(c.intermediate_size, c.hidden_size)
        self.norm2 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.drop(self.attention(x)))
        return self.norm2(x + self.drop(self.ffn_out(F.gelu(self.ffn_in(x)))))


class BertMLM(nn.Module):
    def __init__(self, config: BertConfig = BertConfig()) -> None:
        super().__init__()
        c = self.config = config
        self.tok = nn.Embedding(c.vocab_size, c.hidden_size)
        self.pos = nn.Embedding(c.max_positions, c.hidden_size)
        self.seg = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.embed_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.num_layers))
        # MLM head
        self.transform = nn.Linear(c.hidden_size, c.hidden_size)
        self.head_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.decoder = nn.Linear(c.hidden_size, c.vocab_size)
        self.apply(self._init)
        self.decoder.weight = self.tok.weight  # tied, as in BERT

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)
        x = self.tok(tokens) + self.pos(positions) + self.seg(torch.zeros_like(tokens))
        x = self.drop(self.embed_norm(x))
        for layer in self.encoder:
            x = layer(x)
        return self.decoder(self.head_norm(F.gelu(self.transform(x))))


def build(config: BertConfig) -> BertMLM:
    if config.hidden_size % config.num_heads:
        raise InvalidArgument(
            "num_heads",
            f"{config.num_heads} does not divide hidden_size {config.hidden_size}",
            "divisors of hidden_size",
        )
    if not 1 <= config.seq_len <= config.max_positions:
        raise InvalidArgument("seq_len", f"{config.seq_len} out of range", f"1..{config.max_positions}")
    return BertMLM(config)

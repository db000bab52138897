"""A 2-layer LSTM language model (next-word prediction), in plain torch.

PyTorch's ``word_language_model`` example at its defaults — embedding 200, two LSTM layers
of 200, sequence (BPTT) length 35, tied input/output embeddings — over WikiText-2's
33,278-word vocabulary: ≈ 7.3 M parameters, nearly all of them the (shared) embedding.
Input (B, T) token ids; output (B, T, vocab) next-token logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgetune.errors import InvalidArgument


@dataclass(frozen=True)
class LstmConfig:
    vocab_size: int = 33278  # WikiText-2
    embed_dim: int = 200
    hidden_size: int = 200
    num_layers: int = 2
    seq_len: int = 35  # tokens per sample
    dropout: float = 0.2
    tie_weights: bool = True  # decoder shares the embedding matrix (needs embed_dim == hidden_size)


class LstmLM(nn.Module):
    def __init__(self, config: LstmConfig = LstmConfig()) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim)
        self.drop = nn.Dropout(config.dropout)
        self.lstm = nn.LSTM(
            config.embed_dim,
            config.hidden_size,
            config.num_layers,
            batch_first=True,
            dropout=config.dropout if config.num_layers > 1 else 0.0,
        )
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if config.tie_weights:
            self.decoder.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # a fresh zero state per minibatch: samples are independent windows, not a carried stream
        out, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.decoder(self.drop(out))


def build(config: LstmConfig) -> LstmLM:
    if config.tie_weights and config.embed_dim != config.hidden_size:
        raise InvalidArgument(
            "embed_dim", "tied weights need embed_dim == hidden_size", f"{config.hidden_size}"
        )
    return LstmLM(config)

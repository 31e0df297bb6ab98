"""``tiny_gpt``: a small causal transformer on a synthetic pattern language.

Every sequence repeats a random pattern of ``min_period``..``max_period`` tokens. The first period
is unpredictable (loss ~ log(vocab)); everything after it can be copied from context, which a
transformer learns (induction heads), so the loss falls from ``log(vocab)`` towards the entropy of
the first period's tokens spread over the sequence.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainwatch.trainer.config import Config, GptData, GptModel
from trainwatch.trainer.tasks import Task


def make_sequences(n: int, seq_len: int, vocab: int, d: GptData, seed: int) -> torch.Tensor:
    """``n`` token sequences of length ``seq_len + 1`` (inputs plus the shifted targets)."""
    g = torch.Generator().manual_seed(seed)
    periods = torch.randint(d.min_period, d.max_period + 1, (n,), generator=g)
    patterns = torch.randint(0, vocab, (n, d.max_period), generator=g)
    pos = torch.arange(seq_len + 1)
    return patterns.gather(1, pos[None, :] % periods[:, None])


class Block(nn.Module):
    def __init__(self, m: GptModel) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(m.d_model)
        self.qkv = nn.Linear(m.d_model, 3 * m.d_model)
        self.proj = nn.Linear(m.d_model, m.d_model)
        self.ln2 = nn.LayerNorm(m.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(m.d_model, 4 * m.d_model), nn.GELU(), nn.Linear(4 * m.d_model, m.d_model)
        )
        self.heads = m.heads
        self.dropout = m.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGpt(nn.Module):
    def __init__(self, m: GptModel) -> None:
        super().__init__()
        if m.d_model % m.heads:
            from trainwatch.trainer.config import ConfigError

            raise ConfigError(f"model.d_model ({m.d_model}) must be a multiple of model.heads ({m.heads})")
        self.tok = nn.Embedding(m.vocab, m.d_model)
        self.pos = nn.Embedding(m.seq_len, m.d_model)
        self.blocks = nn.Sequential(*(Block(m) for _ in range(m.layers)))
        self.ln = nn.LayerNorm(m.d_model)
        self.head = nn.Linear(m.d_model, m.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


class TinyGptTask(Task):
    unit = "tokens"

    def __init__(self, cfg: Config, device: torch.device, rank: int = 0) -> None:
        super().__init__(cfg, device, rank)
        m: GptModel = cfg.model
        d: GptData = cfg.data
        self.seqs = make_sequences(d.train_sequences, m.seq_len, m.vocab, d, cfg.seed + 1).to(device)
        self.val = make_sequences(d.val_sequences, m.seq_len, m.vocab, d, cfg.seed + 7919).to(device)
        self.train_size = d.train_sequences * m.seq_len
        self.per_step = cfg.train.batch_size * m.seq_len
        self.vocab = m.vocab
        torch.manual_seed(cfg.seed)
        self.model = TinyGpt(m).to(device)

    def next_batch(self, step: int) -> Any:
        idx = torch.randint(0, self.seqs.shape[0], (self.cfg.train.batch_size,), generator=self.gen)
        s = self.seqs[idx.to(self.device)]
        return s[:, :-1], s[:, 1:]

    def forward_loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        logits = model(x)
        return nn.functional.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1))

    def corrupt(self, batch: Any, factor: float) -> Any:
        # token ids cannot be scaled: a corrupted batch has random targets instead
        x, y = batch
        return x, torch.randint_like(y, 0, self.vocab)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> float:
        x, y = self.val[:, :-1], self.val[:, 1:]
        return float(nn.functional.cross_entropy(model(x).reshape(-1, self.vocab), y.reshape(-1)))

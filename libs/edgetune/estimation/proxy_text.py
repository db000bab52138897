"""Character-level text proxy data sets, a slim causal transformer, and its pre-training (Ahmed et al.).

Seed 000's text experiment (its Table 3) fine-tunes a pre-trained character-level
transformer with every batch size on a proxy corpus (Tiny Shakespeare) to estimate the
passes to a target next-character accuracy, and checks the estimate on target corpora
(Jane Austen, Dickens). Offline, that is:

- **Corpora** — four disjoint character corpora made only from text that ships with
  CPython 3.11's standard library (nothing is downloaded; no module is imported: the
  docstrings are read from the library's ``.py`` sources with :mod:`ast`):

  =====================  ===================================================  ============  ==============
  name                   source                                               stands for    size (3.11.7)
  =====================  ===================================================  ============  ==============
  ``"text-pretrain"``    docstrings (module, class, function) of every other  WikiText-2    ≈ 0.77 MB
                         stdlib module and package — ~160 modules by many
                         authors: broad
  ``"text-proxy"``       ``pydoc_data.topics.topics``: the language           Tiny          ≈ 0.46 MB
                         reference's topics (one coherent work, its own       Shakespeare
                         register: grammar, code blocks, reST)
  ``"text-target-a"``    docstrings of the internet-protocol and data-format  Austen        ≈ 0.33 MB
                         modules (:data:`TARGET_A_MODULES`: email, http,
                         urllib, xml, json, smtplib, ...)
  ``"text-target-b"``    docstrings of the concurrency, process, logging and  Dickens       ≈ 0.23 MB
                         testing modules (:data:`TARGET_B_MODULES`: asyncio,
                         multiprocessing, threading, logging, unittest, ...)
  =====================  ===================================================  ============  ==============

  As in the paper, the targets are the same language and task as the proxy but other text
  (library docstrings rather than the language reference), and the pre-training corpus is
  broad and closer to the targets than to the proxy (WikiText's modern prose is closer to
  Austen's and Dickens's than to Shakespeare's plays). The module groups are disjoint,
  no paragraph of 100 characters or more appears in two corpora, and every docstring text
  appears in one corpus at most (exact duplicates, such as a
  docstring copied between ``io`` and ``_pyio``, are kept where first met: proxy, target
  a, target b, pre-training). Packages that some distributions ship separately or patch
  (``test``, ``idlelib``, ``tkinter``, ``turtle``, ``lib2to3``, ``distutils``,
  ``ensurepip``, ``site``, ``sysconfig``) and the generated ``encodings`` boilerplate are
  left out. The text is the same on every CPython 3.11 with its sources; the sizes above
  are 3.11.7's (a patch release can change a few docstrings).

  Characters are filtered to the paper's vocabulary — ASCII letters, digits, punctuation,
  space and newline (:data:`VOCAB`, 96 symbols, one fixed vocabulary for every corpus so
  that one checkpoint serves all); anything else (tabs, non-ASCII) is dropped.

- **Data** — :func:`load_text_data`: the first 90 % of a corpus (by position) is the
  training split, the last 10 % the held-out split, as the paper's 90 / 10 split.
  Samples are non-overlapping windows of ``seq_len`` (64) characters: ``x`` (n, 64) int64
  character ids, ``y`` the same windows shifted by one (the next characters). The
  held-out windows are fixed: at most :data:`TEST_WINDOWS` of them, evenly spaced over
  the held-out text (16,384 characters scored per evaluation), so that an evaluation
  after every s-sample pass stays cheap. Accuracy is next-character accuracy over every
  position (:func:`edgetune.estimation.proxy.accuracy`).

- **Model** — :class:`SlimCharTransformer` (``"chartransformer-slim"``): the paper's
  model (6 layers, 6 heads, 256 embedding, sequence 64; ≈ 4.8 M parameters) at a size a
  CPU trains in seconds: token + learned position embeddings, 2 pre-LN blocks (4-head
  causal self-attention, GELU MLP 4×), final LayerNorm, linear head; 48 embedding,
  sequence 64, no dropout: 69,024 parameters (≈ 70× fewer). A training step costs one
  CPU core ≈ 0.7 ms per 64-character sample at b = 128 (≈ 1.5 ms at b = 4, where the
  per-step overhead dominates); scoring the held-out windows ≈ 60 ms. Its forward
  returns logits shaped ``(B, vocab, T)`` so that ``F.cross_entropy(model(x), y)`` with
  ``y`` (B, T) works unchanged in :func:`edgetune.estimation.batch_efficiency.train_to_target`.

- **Pre-trained checkpoint** — :func:`pretrain_text_state` (through
  :func:`edgetune.estimation.proxy.pretrained_state`): :data:`PRETRAIN_STEPS` (400) AdamW
  steps of batch 32 on random windows of ``"text-pretrain"``, lr 3e-3 with a linear
  warm-up and cosine decay, fixed seed (≈ 10 s on one core). Short on purpose: the
  checkpoint has learnt common characters and pairs (≈ 35 % next-character accuracy on
  the held-out pre-training text, 46 % on the proxy, whose indented code blocks are easy,
  34 % on the targets) and leaves clear headroom: fine-tuning (AdamW, lr 1e-3 ·
  sqrt(b / 128)) climbs steadily and is still rising after 20,000 samples, at 53–55 % on
  the proxy and 40–44 % on the targets (b = 128 lowest, b = 4–16 highest).
"""

from __future__ import annotations

import ast
import math
import pydoc_data.topics
import sysconfig
import tokenize
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from edgetune.errors import InvalidArgument
from edgetune.estimation.proxy_data import ProxyData

TEXT_MODELS = ("chartransformer-slim",)
PRETRAIN = "text-pretrain"
TEXT_PROXY = "text-proxy"
TEXT_TARGETS = ("text-target-a", "text-target-b")
TEXT_DATASETS = (PRETRAIN, TEXT_PROXY, *TEXT_TARGETS)

#: newline + printable ASCII (space, punctuation, digits, letters): the paper's vocabulary, one for all sets
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))
VOCAB_SIZE = len(VOCAB)  # 96
SEQ_LEN = 64
TRAIN_FRACTION = 0.9
TEST_WINDOWS = 256  # held-out windows scored per evaluation (evenly spaced over the held-out 10 %)
PRETRAIN_STEPS = 400
PRETRAIN_BATCH = 32
PRETRAIN_LR = 3e-3

#: the Austen stand-in: internet protocols and data formats
TARGET_A_MODULES = ("email", "http", "urllib", "xml", "xmlrpc", "json", "html", "wsgiref", "mailbox", "smtplib",
                    "imaplib", "poplib", "nntplib", "ftplib", "telnetlib", "mimetypes", "base64", "quopri", "uu",
                    "cgi", "cgitb", "netrc", "mailcap", "smtpd")
#: the Dickens stand-in: concurrency, processes, logging and testing
TARGET_B_MODULES = ("asyncio", "concurrent", "multiprocessing", "threading", "_threading_local", "subprocess",
                    "logging", "unittest", "queue", "sched", "selectors", "socketserver", "signal", "asynchat",
                    "asyncore")
#: not in any corpus: shipped separately or patched by some distributions, generated, or not prose
EXCLUDED_MODULES = ("test", "idlelib", "tkinter", "turtle", "turtledemo", "lib2to3", "distutils", "ensurepip",
                    "site", "sysconfig", "site-packages", "dist-packages", "encodings", "pydoc_data", "this",
                    "antigravity", "__hello__", "__phello__", "lib-dynload")
_EXCLUDED_PREFIXES = ("config-", "_sysconfigdata")  # build configuration: named after the platform
_TEST_DIRS = {"test", "tests", "idle_test"}

_LUT = np.full(256, -1, dtype=np.int64)
_LUT[np.frombuffer(VOCAB.encode("ascii"), dtype=np.uint8)] = np.arange(VOCAB_SIZE)


# --- corpora -----------------------------------------------------------------------------
def filter_text(text: str) -> str:
    """``text`` with every character outside :data:`VOCAB` dropped."""
    raw = np.frombuffer(text.encode("ascii", "ignore"), dtype=np.uint8)
    return raw[_LUT[raw] >= 0].tobytes().decode("ascii")


def encode(text: str) -> np.ndarray:
    """Character ids (int64) of ``text``; characters outside :data:`VOCAB` are dropped."""
    raw = np.frombuffer(text.encode("ascii", "ignore"), dtype=np.uint8)
    ids = _LUT[raw]
    return ids[ids >= 0]


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in np.asarray(ids).ravel())


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _module_key(rel: Path) -> str:
    """The top-level module or package a stdlib source file belongs to (``email/mime/text.py`` → ``email``)."""
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _docstrings(node: ast.AST) -> Iterator[str]:
    """Docstrings of the module, classes and functions under ``node``, in source order."""
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        doc = ast.get_docstring(node, clean=True)
        if doc:
            yield doc
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.expr):  # expressions hold no definitions
            yield from _docstrings(child)


@lru_cache(maxsize=1)
def _stdlib_docstrings() -> dict[str, tuple[str, ...]]:
    """Every docstring of the stdlib's sources, grouped by top-level module, files in sorted path order."""
    root = _stdlib()
    out: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        key = _module_key(rel)
        if key in EXCLUDED_MODULES or key.startswith(_EXCLUDED_PREFIXES) or _TEST_DIRS & set(rel.parts[:-1]):
            continue
        try:
            with tokenize.open(path) as fh:
                tree = ast.parse(fh.read(), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):  # pragma: no cover - not in a sound stdlib
            continue
        out.setdefault(key, []).extend(_docstrings(tree))
    return {k: tuple(v) for k, v in out.items()}


@lru_cache(maxsize=1)
def _corpora() -> dict[str, str]:
    topics = pydoc_data.topics.topics
    docs = _stdlib_docstrings()
    groups = {
        TEXT_PROXY: [topics[k] for k in sorted(topics)],
        "text-target-a": [d for m in TARGET_A_MODULES for d in docs.get(m, ())],
        "text-target-b": [d for m in TARGET_B_MODULES for d in docs.get(m, ())],
        PRETRAIN: [d for m in sorted(docs) if m not in TARGET_A_MODULES + TARGET_B_MODULES for d in docs[m]],
    }
    seen: set[str] = set()
    out = {}
    for name, pieces in groups.items():  # an exact duplicate stays where it is first met
        kept = []
        for piece in pieces:
            text = filter_text(piece).strip("\n")
            if text and text not in seen:
                seen.add(text)
                kept.append(text)
        out[name] = "\n\n".join(kept) + "\n"
    return out


def _check_name(name: str) -> None:
    if name not in TEXT_DATASETS:
        raise InvalidArgument("proxy", f"unknown text data set {name!r}", ", ".join(TEXT_DATASETS))


def corpus_text(name: str) -> str:
    """The whole filtered corpus ``name`` (see :data:`TEXT_DATASETS`) as one string."""
    _check_name(name)
    return _corpora()[name]


def load_text_data(name: str, seq_len: int = SEQ_LEN) -> ProxyData:
    """The corpus ``name`` as (n, ``seq_len``) int64 windows: x the characters, y the next ones.

    Train: the first 90 % of the text, cut into non-overlapping windows. Held-out: the last
    10 %, at most :data:`TEST_WINDOWS` fixed windows evenly spaced over it.
    """
    _check_name(name)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise InvalidArgument("seq_len", f"{seq_len!r} is not a positive window length", ">= 1")
    return _load_text(name, seq_len)


def _windows(ids: np.ndarray, seq_len: int, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
    w = torch.from_numpy(ids[idx])
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


@lru_cache(maxsize=16)
def _load_text(name: str, seq_len: int) -> ProxyData:
    ids = encode(corpus_text(name))
    cut = int(len(ids) * TRAIN_FRACTION)
    train, test = ids[:cut], ids[cut:]
    n_train = (len(train) - 1) // seq_len
    n_test_all = (len(test) - 1) // seq_len
    if n_train < 1 or n_test_all < 1:  # pragma: no cover - the corpora are hundreds of kB
        raise InvalidArgument("seq_len", f"{seq_len} is too long for {name!r}", "shorter windows")
    x_train, y_train = _windows(train, seq_len, np.arange(n_train) * seq_len)
    n_test = min(n_test_all, TEST_WINDOWS)
    # evenly spaced over the whole held-out text, each on the window grid
    slots = np.floor(np.arange(n_test) * (n_test_all / n_test)).astype(np.int64)
    x_test, y_test = _windows(test, seq_len, slots * seq_len)
    return ProxyData(name, x_train, y_train, x_test, y_test)


# --- model -------------------------------------------------------------------------------
class _Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, n_embd: int, n_head: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, mlp_ratio * n_embd), nn.GELU(),
                                 nn.Linear(mlp_ratio * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class SlimCharTransformer(nn.Module):
    """A small GPT-style causal character model; ``forward(x (B, T))`` → logits ``(B, vocab, T)``."""

    def __init__(self, vocab_size: int = VOCAB_SIZE, seq_len: int = SEQ_LEN, n_layer: int = 2, n_head: int = 4,
                 n_embd: int = 48) -> None:
        super().__init__()
        if n_embd % n_head:
            raise InvalidArgument("n_head", f"{n_embd} embedding dimensions do not split into {n_head} heads",
                                  f"a divisor of {n_embd}")
        self.seq_len = seq_len
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(seq_len, n_embd)
        self.blocks = nn.Sequential(*[_Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size)
        # GPT-2's initialisation: N(0, 0.02), residual projections scaled down with depth
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        if t > self.seq_len:
            raise InvalidArgument("x", f"sequence of {t} characters exceeds the model's {self.seq_len}",
                                  f"<= {self.seq_len}")
        h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
        h = self.ln_f(self.blocks(h))
        return self.head(h).transpose(1, 2)  # (B, vocab, T): the class dimension second, for cross_entropy


def build_text_model(workload: str) -> SlimCharTransformer:
    if workload == "chartransformer-slim":
        return SlimCharTransformer()
    raise InvalidArgument("workload", f"unknown text model {workload!r}", ", ".join(TEXT_MODELS))


# --- pre-training ------------------------------------------------------------------------
def pretrain_text_state(workload: str = "chartransformer-slim", steps: int = PRETRAIN_STEPS,
                        batch_size: int = PRETRAIN_BATCH, lr: float = PRETRAIN_LR, seed: int = 0) -> dict[str, torch.Tensor]:
    """``workload`` trained ``steps`` AdamW steps on random windows of ``"text-pretrain"`` (seeded).

    Random offsets (not the fixed training windows) as a language model's pre-training; the
    window starts come from a seeded generator, so the checkpoint is the same in every process.
    Returned tensors are detached copies.
    """
    corpus = encode(corpus_text(PRETRAIN))
    ids = torch.from_numpy(corpus[: int(len(corpus) * TRAIN_FRACTION)])
    torch.manual_seed(seed)
    model = build_text_model(workload)
    seq_len = model.seq_len
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(  # linear warm-up, then cosine decay to a tenth
        opt, lambda i: min(1.0, (i + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(i, steps) / steps))))
    rng = np.random.default_rng([seed, 7])
    model.train()
    for _ in range(steps):
        starts = torch.from_numpy(rng.integers(0, len(ids) - seq_len - 1, batch_size))
        w = ids[starts[:, None] + torch.arange(seq_len + 1)[None, :]]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(w[:, :-1]), w[:, 1:]).backward()
        opt.step()
        sched.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}

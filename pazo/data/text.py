"""Word-level text for the LSTM settings (IMDB and any saved Hugging Face text data set): lower-cased
`\\w+` tokens, a vocabulary of the `size` most frequent ones (ids 2.., PAD = 0, UNK = 1), and
fixed-length id rows, cut or padded to `max_length`.

The vocabulary is itself a release of the texts it is counted on: built from private texts it
is a release that no noise covers, so every loader records where it came from
(`vocab_provenance`).
"""
from __future__ import annotations

import re
from collections import Counter

import torch

from pazo.errors import ConfigError

PAD, UNK = 0, 1
TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def build_vocab(texts, size: int) -> dict[str, int]:
    counts = Counter(tok for text in texts for tok in tokenize(text))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]  # ties broken by token
    return {tok: i + 2 for i, (tok, _) in enumerate(ranked)}


def _pair_lengths(first: int, second: int, budget: int) -> tuple[int, int]:
    """Longest-first truncation of a pair into `budget` tokens: the shorter text keeps all of
    itself if it fits in half, otherwise both get half."""
    if first + second <= budget:
        return first, second
    half = budget // 2
    if first <= half:
        return first, budget - first
    if second <= budget - half:
        return budget - second, second
    return half, budget - half


def encode(texts, vocab: dict[str, int], max_length: int, pairs=None) -> torch.Tensor:
    """Id rows [N, max_length]. With `pairs`, row i is the tokens of texts[i], one PAD, then the
    tokens of pairs[i] (cut longest-first to fit): the LSTM reads the PAD as the boundary and its
    mean pooling skips it."""
    out = torch.full((len(texts), max_length), PAD, dtype=torch.long)
    for row, text in enumerate(texts):
        ids = [vocab.get(tok, UNK) for tok in tokenize(text)]
        if pairs is not None:
            other = [vocab.get(tok, UNK) for tok in tokenize(pairs[row])]
            keep, keep_other = _pair_lengths(len(ids), len(other), max_length - 1)
            ids = ids[:keep] + [PAD] + other[:keep_other]
        ids = ids[:max_length]
        out[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def vocab_provenance(source: str) -> dict:
    """What the run summary records about the vocabulary: `public` is covered by the guarantee
    (public data costs no privacy), `private` is not."""
    if source == "private":
        return {"vocab_source": "private",
                "outside_guarantee": ["the vocabulary (its most frequent tokens) is computed from the "
                                      "private training texts without noise: a release the DP "
                                      "guarantee does not cover"]}
    return {"vocab_source": source}


def source_vocab(source: str, public_texts, private_texts, size: int) -> tuple[dict[str, int], dict]:
    """The vocabulary counted on the public or the private texts (`dataset.vocab_source`), and
    what the run summary records about it."""
    if source not in ("public", "private"):
        raise ConfigError(f"dataset.vocab_source must be public or private, got {source!r}")
    vocab = build_vocab(public_texts if source == "public" else private_texts, size)
    return vocab, {**vocab_provenance(source), "vocab_found": len(vocab)}

"""Offline embeddings for failure signatures, behind a small abstract class.

chromadb's default embedding downloads a model at first use, which fails on air-gapped clusters.
`HashingEmbedder` needs no model and no network: the signature's word tokens and word bigrams
(masked, see `signature.tokens`) are hashed into a fixed number of signed buckets with sublinear
term frequency, then L2-normalised, so the cosine of two vectors approximates the overlap of their
log vocabulary. It is the vector channel of the store (`search --mode vector`). The default
ranking is TF-IDF (lexical.py): on log text it found the right incident far more often than
hashing vectors or MiniLM (figures in bench/retrieval_eval.py and the README); a learned embedding
can replace this one by implementing `Embedder` and registering it in `make_embedder`.

`chroma_function` adapts any `Embedder` to chromadb's `EmbeddingFunction` protocol (registered
under its own name, so a collection reopens with the same function and never the default).
"""

from __future__ import annotations

import math
import zlib
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from diagnoser.retrieve.signature import tokens


class Embedder(ABC):
    """Texts in, L2-normalised float32 vectors out: shape (len(texts), dim)."""

    name: str
    dim: int

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed signature texts (already masked)."""

    def describe(self) -> dict[str, Any]:
        """What a store records, to refuse vectors made by a different embedder."""
        return {"name": self.name, "dim": self.dim}


class HashingEmbedder(Embedder):
    """Signed feature hashing of unigrams and bigrams with sublinear TF (no model, no network)."""

    name = "hashing-v1"

    def __init__(self, dim: int = 256, bigrams: bool = True, placeholder_weight: float = 0.25) -> None:
        self.dim = dim
        self.bigrams = bigrams
        self.placeholder_weight = placeholder_weight
        self._cache: dict[str, tuple[int, float]] = {}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "dim": self.dim, "bigrams": self.bigrams,
                "placeholder_weight": self.placeholder_weight}

    def _bucket(self, feature: str) -> tuple[int, float]:
        hit = self._cache.get(feature)
        if hit is None:
            h = zlib.crc32(feature.encode("utf-8"))
            weight = self.placeholder_weight if feature.startswith("<") else 1.0
            hit = (h % self.dim, weight if (h >> 31) & 1 else -weight)
            if len(self._cache) < 200_000:
                self._cache[feature] = hit
        return hit

    def features(self, text: str) -> Counter[str]:
        toks = tokens(text)
        feats = Counter(toks)
        if self.bigrams:
            feats.update(f"{a} {b}" for a, b in zip(toks, toks[1:], strict=False))
        return feats

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, tf in self.features(text).items():
                index, weight = self._bucket(feature)
                out[row, index] += weight * (1.0 + math.log(tf))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms


def make_embedder(spec: dict[str, Any] | None = None) -> Embedder:
    """The embedder a store was created with (`Embedder.describe()`), or the default."""
    spec = dict(spec or {})
    name = spec.pop("name", HashingEmbedder.name)
    if name != HashingEmbedder.name:
        raise ValueError(f"unknown embedder {name!r} (this version knows {HashingEmbedder.name!r})")
    return HashingEmbedder(**spec)


_CHROMA_CLASS: type | None = None


def chroma_function(embedder: Embedder) -> Any:
    """`embedder` as a chromadb `EmbeddingFunction` (class built and registered on first use,
    so that importing this module does not import chromadb, which takes seconds)."""
    global _CHROMA_CLASS
    if _CHROMA_CLASS is None:
        from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
        from chromadb.utils.embedding_functions import register_embedding_function

        class DiagnoserEmbedding(EmbeddingFunction[Documents]):
            """chromadb adapter over an `Embedder`; persisted by its `describe()` config."""

            def __init__(self, embedder: Embedder | None = None, **spec: Any) -> None:
                self.embedder = embedder or make_embedder(spec or None)

            def __call__(self, input: Documents) -> Embeddings:  # noqa: A002 - chromadb's signature
                return list(self.embedder.embed(list(input)))

            @staticmethod
            def name() -> str:
                return "diagnoser-offline"

            def default_space(self) -> Any:
                return "cosine"

            def supported_spaces(self) -> Any:
                return ["cosine"]

            @staticmethod
            def build_from_config(config: dict[str, Any]) -> DiagnoserEmbedding:
                return DiagnoserEmbedding(**config)

            def get_config(self) -> dict[str, Any]:
                return self.embedder.describe()

        _CHROMA_CLASS = register_embedding_function(DiagnoserEmbedding)
    return _CHROMA_CLASS(embedder)

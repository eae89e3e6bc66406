"""TF-IDF cosine over masked signature tokens: the ranking that measured best on log text.

An inverted index in plain numpy (no model, no network, no chromadb import): documents are token
count vectors; a query's score against a document is the cosine of their TF-IDF vectors
(sublinear tf, smoothed BM25-style idf on both sides), so it is an absolute similarity in [0, 1]
(1.0 = the same tokens in the same proportions) that the neighbour vote can put a threshold on.
IDF is what makes it work on logs: the lines every failure shares (collective timeouts, SIGTERM
teardown, `Traceback`) weigh little, the rare words of the root cause weigh a lot.

Documents are appended (`add`) or the whole index is rebuilt (`build`); the derived arrays
(idf, norms, postings) are recomputed lazily after a change. `save`/`load` write plain `.npy`
files that load memory-mapped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from diagnoser import atomic
from diagnoser.retrieve.signature import tokens

MAX_TOKEN = 48
_ARRAYS = ("doc_ptr", "doc_term", "doc_tf", "term_ptr", "post_doc", "post_w", "norm", "term_max")
FULL_SCAN_POSTINGS = 200_000  # below this many postings a query scans them all (exact, a few ms)
RARE_POSTINGS = 5_000  # above it: candidates come from the rarest words' postings, up to this many


def _blob(items: Sequence[str]) -> np.ndarray:
    return np.frombuffer("\n".join(items).encode("utf-8"), dtype=np.uint8)


def _unblob(blob: np.ndarray) -> list[str]:
    text = bytes(blob).decode("utf-8")
    return text.split("\n") if text else []


class LexicalIndex:
    """Documents keyed by an external id; `search` returns (id, cosine) best first."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.vocab: dict[str, int] = {}
        self._terms: list[str] = []
        self._row: dict[str, int] = {}
        self.doc_ptr = np.zeros(1, dtype=np.int64)
        self.doc_term = np.zeros(0, dtype=np.int32)
        self.doc_tf = np.zeros(0, dtype=np.float32)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._derived = False
        self.last_exact = True  # whether the last search was provably exact (see _pruned)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._row

    def row(self, doc_id: str) -> int:
        """The position of a document (in `ids`, and in any array kept alongside the index)."""
        return self._row[doc_id]

    # ------------------------------------------------------------------ building
    def _counts(self, text: str, grow: bool) -> tuple[np.ndarray, np.ndarray]:
        counts = Counter(t[:MAX_TOKEN] for t in tokens(text))
        terms, tfs = [], []
        for tok, tf in counts.items():
            tid = self.vocab.get(tok)
            if tid is None:
                if not grow:
                    continue
                tid = self.vocab[tok] = len(self._terms)
                self._terms.append(tok)
            terms.append(tid)
            tfs.append(tf)
        return np.asarray(terms, dtype=np.int32), np.asarray(tfs, dtype=np.float32)

    def add(self, doc_id: str, text: str) -> None:
        """Append a document (an id already present is ignored: signatures never change)."""
        if doc_id in self._row:
            return
        self._row[doc_id] = len(self.ids)
        self.ids.append(doc_id)
        self._pending.append(self._counts(text, grow=True))
        self._derived = False

    @classmethod
    def build(cls, docs: Iterable[tuple[str, str]]) -> LexicalIndex:
        index = cls()
        for doc_id, text in docs:
            index.add(doc_id, text)
        return index

    def _flush(self) -> None:
        if not self._pending:
            return
        lengths = np.fromiter((len(t) for t, _ in self._pending), dtype=np.int64, count=len(self._pending))
        self.doc_ptr = np.concatenate([self.doc_ptr, self.doc_ptr[-1] + np.cumsum(lengths)])
        self.doc_term = np.concatenate([self.doc_term, *(t for t, _ in self._pending)])
        self.doc_tf = np.concatenate([self.doc_tf, *(f for _, f in self._pending)])
        self._pending = []

    def _derive(self) -> None:
        """idf, document norms and the term-major postings with their weights."""
        self._flush()
        n_docs, n_terms = len(self.ids), len(self._terms)
        df = np.bincount(self.doc_term, minlength=n_terms).astype(np.float64)
        self.idf = np.log1p((n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)
        doc_of = np.repeat(np.arange(n_docs, dtype=np.int32), np.diff(self.doc_ptr))
        w = (1.0 + np.log(self.doc_tf)) * self.idf[self.doc_term]
        self.norm = np.sqrt(np.bincount(doc_of, weights=w.astype(np.float64) ** 2, minlength=n_docs)).astype(np.float32)
        self.norm[self.norm == 0] = 1.0
        order = np.argsort(self.doc_term, kind="stable")
        self.post_doc = doc_of[order]
        self.post_w = (w / self.norm[doc_of])[order].astype(np.float32)
        self.term_ptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.doc_term, minlength=n_terms), out=self.term_ptr[1:])
        self.term_max = np.zeros(n_terms, dtype=np.float32)
        nonempty = np.flatnonzero(np.diff(self.term_ptr))
        if len(nonempty):
            self.term_max[nonempty] = np.maximum.reduceat(self.post_w, self.term_ptr[nonempty])
        self._derived = True

    # ------------------------------------------------------------------ querying
    def search(self, text: str, k: int = 5, min_score: float = 0.0) -> list[tuple[str, float]]:
        """The `k` documents closest to `text` by TF-IDF cosine, best first."""
        if not self.ids:
            return []
        if not self._derived:
            self._derive()
        counts = Counter(t[:MAX_TOKEN] for t in tokens(text))
        known = [(self.vocab[t], tf) for t, tf in counts.items() if t in self.vocab]
        if not known:
            return []
        terms = np.fromiter((t for t, _ in known), dtype=np.int64, count=len(known))
        qw = (1.0 + np.log(np.fromiter((tf for _, tf in known), dtype=np.float64, count=len(known)))) * self.idf[terms]
        # Words the index has never seen still count in the query's norm (at the highest idf): a
        # query full of unknown words is not similar to anything, however well its few known words match.
        idf_new = np.log1p((len(self.ids) + 0.5) / 0.5)
        unknown = np.array([1.0 + np.log(tf) for t, tf in counts.items() if t not in self.vocab]) * idf_new
        qn = float(np.sqrt((qw**2).sum() + (unknown**2).sum()))
        if qn == 0.0:
            return []
        q = qw / qn
        starts, ends = self.term_ptr[terms], self.term_ptr[terms + 1]
        self.last_exact = True
        hit = self._pruned(terms, q, starts, ends, k)
        if hit is None:  # the exact, exhaustive path
            docs = np.concatenate([self.post_doc[s:e] for s, e in zip(starts, ends, strict=True)])
            weights = np.concatenate([self.post_w[s:e] * w for s, e, w in zip(starts, ends, q, strict=True)])
            scores = np.bincount(docs, weights=weights, minlength=len(self.ids))
            cand = np.arange(len(scores))
        else:
            cand, scores = hit
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self.ids[cand[i]], float(min(1.0, scores[i]))) for i in top if scores[i] > min_score]

    def _pruned(self, terms: np.ndarray, q: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Top-k without scanning the long postings of common words; None: scan everything instead.

        Used when the query's postings are long (large stores). The candidates are the documents
        that contain one of the query's rarest words (up to `RARE_POSTINGS` postings); each is then
        scored exactly from its own row. A document outside the candidates shares only common words
        with the query and scores at most `bound` (their largest possible contribution): when the
        k-th candidate beats that the answer is exact; when not, it is still the best candidate set
        that shares a distinctive word (`bench/retrieval_eval.py` measures the agreement).
        """
        lengths = ends - starts
        if int(lengths.sum()) <= FULL_SCAN_POSTINGS:
            return None
        order = np.argsort(lengths, kind="stable")
        n_rare = max(1, int(np.searchsorted(np.cumsum(lengths[order]), RARE_POSTINGS, side="right")))
        rare, common = order[:n_rare], order[n_rare:]
        cand = np.unique(np.concatenate([self.post_doc[starts[t]:ends[t]] for t in rare]))
        if len(cand) < k:
            return None
        qvec = np.zeros(len(self.idf), dtype=np.float64)
        qvec[terms] = q
        row_start, row_len = self.doc_ptr[cand], np.diff(self.doc_ptr)[cand]
        row_of = np.repeat(np.arange(len(cand)), row_len)
        entry = np.repeat(row_start - (np.cumsum(row_len) - row_len), row_len) + np.arange(int(row_len.sum()))
        term = self.doc_term[entry]
        qv = qvec[term]
        hit = qv != 0
        weights = (1.0 + np.log(self.doc_tf[entry[hit]])) * self.idf[term[hit]] * qv[hit] / self.norm[cand[row_of[hit]]]
        scores = np.bincount(row_of[hit], weights=weights, minlength=len(cand))
        self.last_exact = bool(np.partition(scores, len(scores) - k)[len(scores) - k]
                               >= float(np.sum(q[common] * self.term_max[terms[common]])))
        return cand, scores

    # ------------------------------------------------------------------ persistence
    def save(self, directory: Path) -> None:
        """Write the index as `.npy` files into `directory`, each replaced atomically."""
        if not self._derived:
            self._derive()
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {name: getattr(self, name) for name in _ARRAYS}
        arrays["ids"] = _blob(self.ids)
        arrays["terms"] = _blob(self._terms)
        arrays["idf"] = self.idf
        for name, arr in arrays.items():
            with atomic.replacing(directory / f"{name}.npy") as tmp, tmp.open("wb") as fh:
                np.save(fh, np.ascontiguousarray(arr), allow_pickle=False)

    @classmethod
    def load(cls, directory: Path) -> LexicalIndex:
        """Read an index written by `save` (memory-mapped); OSError/ValueError if missing or damaged."""
        index = cls()
        loaded = {name: np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False)
                  for name in (*_ARRAYS, "ids", "terms", "idf")}
        index.ids = _unblob(loaded["ids"])
        index._terms = _unblob(loaded["terms"])
        if not (len(loaded["norm"]) == len(index.ids) == len(loaded["doc_ptr"]) - 1
                and len(loaded["idf"]) == len(index._terms) == len(loaded["term_ptr"]) - 1):
            raise ValueError(f"lexical index in {directory} is inconsistent (being rewritten?)")
        index.vocab = {t: i for i, t in enumerate(index._terms)}
        index._row = {d: i for i, d in enumerate(index.ids)}
        for name in _ARRAYS:
            setattr(index, name, loaded[name])
        index.idf = loaded["idf"]
        index._derived = True
        return index

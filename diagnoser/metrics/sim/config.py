"""Inputs of the simulator: failure rates per category, timings, and the diagnosis confusion matrix.

Defaults come from the literature where it has numbers and are marked "assumed" where it does
not; every value can be overridden from a TOML or YAML file (`load_config`), e.g.

    [simulate]
    days = 60
    hang_detect_s = 600
    [simulate.categories.hardware]
    rate_per_1000_node_days = 3.0

Sources: Meta RSC (Kokolis et al., HPCA 2025): r_f = 6.5 (RSC-1) / 2.34 (RSC-2) failures per
1,000 node-days, lemon nodes that fail repeatedly; Llama 3 (Dubey et al. 2024): of 419 unexpected
interruptions in 54 days on 16,384 GPUs ~78% were hardware, ~13% software bugs, the rest network
and host maintenance; ByteRobust: hang detection in 10-30 s instead of 10-30 min timeouts.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from diagnoser.models import Category

DEFAULT_CONFUSION = Path(__file__).with_name("confusion.json")
ENV_CONFIG = "DIAGNOSER_METRICS_CONFIG"
ENV_CONFUSION = "DIAGNOSER_CONFUSION_MATRIX"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CategoryRates(_Strict):
    """How one category of failure arrives and behaves."""

    rate_per_1000_node_days: float = Field(default=0.0, ge=0)  # scales with the node count
    rate_per_day: float = Field(default=0.0, ge=0)  # per job, independent of scale
    hang_fraction: float = Field(default=0.0, ge=0, le=1)  # detected by the watchdog, not an exit
    persistent_fraction: float = Field(default=0.0, ge=0, le=1)  # the fault stays and fails again
    recur_mean_s: float = Field(default=3600.0, gt=0)  # running time until a persistent fault recurs


def _default_categories() -> dict[Category, CategoryRates]:
    return {
        # 6.5 per 1,000 node-days in all (Meta RSC-1), split ~77/23 as in Llama 3's interruptions.
        # persistent: a bad ("lemon") node that fails again if the job is restarted onto it (assumed 20%).
        Category.HARDWARE: CategoryRates(rate_per_1000_node_days=5.0, hang_fraction=0.3,
                                         persistent_fraction=0.2, recur_mean_s=7200.0),
        Category.INFRA: CategoryRates(rate_per_1000_node_days=1.5, hang_fraction=0.5),
        # per job, not per node (assumed 0.5/day); most user failures are deterministic bugs.
        Category.USER_CODE: CategoryRates(rate_per_day=0.5, hang_fraction=0.1, persistent_fraction=0.7,
                                          recur_mean_s=600.0),
    }


class SimConfig(_Strict):
    """Everything the simulator needs except the scale, the policy and the seed. Seconds."""

    days: float = Field(default=30.0, gt=0)  # simulated wall time
    gpus_per_node: int = Field(default=8, ge=1)
    checkpoint_write_s: float = Field(default=60.0, ge=0)  # assumed, blocking
    checkpoint_interval_s: float | None = Field(default=None, gt=0)  # None: Young's optimum for the rates
    restart_s: float = Field(default=600.0, ge=0)  # assumed: reschedule, init, checkpoint load
    exit_detect_s: float = Field(default=30.0, ge=0)  # a crashed rank tears the job down
    hang_detect_s: float = Field(default=1800.0, ge=0)  # collective timeout (10-30 min in the wild)
    diagnosis_s: float = Field(default=30.0, ge=0)  # diagnoser's triage
    backoff_s: float = Field(default=30.0, ge=0)  # retry_after_backoff
    crash_loop: int = Field(default=3, ge=2)  # diagnoser gives up (a human acts) after this many in a row
    human_response_s: float = Field(default=1800.0, ge=0)  # on-call answers a notification / approval
    fix_s: float = Field(default=3600.0, ge=0)  # a user fixes a deterministic bug
    naive_notice_s: float = Field(default=7200.0, ge=0)  # nobody notified: a crash loop is noticed
    bad_node_heal_s: float = Field(default=43200.0, gt=0)  # mean time until fleet checks drain a lemon
    categories: dict[Category, CategoryRates] = Field(default_factory=_default_categories)

    @model_validator(mode="after")
    def _known_categories(self) -> SimConfig:
        if not self.categories:
            raise ValueError("at least one failure category needs a rate")
        return self

    def nodes(self, gpus: int) -> int:
        return -(-gpus // self.gpus_per_node)

    def base_rates(self, gpus: int) -> dict[Category, float]:
        """Failures per second of each category at this scale (fresh faults only)."""
        n = self.nodes(gpus)
        return {c: (r.rate_per_1000_node_days * n / 1000.0 + r.rate_per_day) / 86400.0
                for c, r in self.categories.items()}

    def interval_s(self, gpus: int) -> float:
        if self.checkpoint_interval_s:
            return self.checkpoint_interval_s
        lam = sum(self.base_rates(gpus).values())
        return (2.0 * max(self.checkpoint_write_s, 1e-9) / lam) ** 0.5 if lam > 0 else self.days * 86400.0

    @classmethod
    def model_assumptions(cls, rf_per_1000_node_days: float, restart_s: float, write_s: float,
                          interval_s: float | None = None, days: float = 30.0, gpus_per_node: int = 8) -> SimConfig:
        """The analytic model's world: one Poisson failure process, no detection or diagnosis
        latency, no persistent faults, every failure costs u0 plus the work since the checkpoint."""
        return cls(days=days, gpus_per_node=gpus_per_node, checkpoint_write_s=write_s,
                   checkpoint_interval_s=interval_s, restart_s=restart_s, exit_detect_s=0.0, hang_detect_s=0.0,
                   diagnosis_s=0.0, categories={Category.HARDWARE: CategoryRates(
                       rate_per_1000_node_days=rf_per_1000_node_days)})


class Confusion(_Strict):
    """P(predicted | true) over categories; rows = truth, columns = predicted."""

    labels: list[Category]
    matrix: list[list[float]]

    @model_validator(mode="after")
    def _shape(self) -> Confusion:
        n = len(self.labels)
        if n == 0 or len(self.matrix) != n or any(len(r) != n for r in self.matrix):
            raise ValueError("confusion matrix must be square with one row and column per label")
        if any(v < 0 for r in self.matrix for v in r) or any(sum(r) <= 0 for r in self.matrix):
            raise ValueError("confusion matrix needs non-negative entries and non-empty rows")
        return self

    def row(self, truth: Category) -> list[tuple[Category, float]]:
        """Predicted categories with probabilities; a truth without a row is always predicted right."""
        if truth not in self.labels:
            return [(truth, 1.0)]
        r = self.matrix[self.labels.index(truth)]
        total = sum(r)
        return [(c, v / total) for c, v in zip(self.labels, r, strict=True) if v > 0]

    def accuracy(self, truth: Category) -> float:
        return dict(self.row(truth)).get(truth, 0.0)

    @classmethod
    def perfect(cls) -> Confusion:
        cats = list(Category)
        return cls(labels=cats, matrix=[[1.0 if i == j else 0.0 for j in range(len(cats))] for i in range(len(cats))])


def load_confusion(path: str | Path | None = None) -> Confusion:
    """The matrix at `path`, $DIAGNOSER_CONFUSION_MATRIX, or the shipped default."""
    p = Path(path or os.environ.get(ENV_CONFUSION) or DEFAULT_CONFUSION)
    data = json.loads(p.read_text(encoding="utf-8"))
    return Confusion(labels=data["labels"], matrix=data["matrix"])


def read_config_file(path: str | Path | None, section: str) -> dict:
    """One section of a TOML/YAML config file (`path` or $DIAGNOSER_METRICS_CONFIG); {} if none.

    A file without that section is taken whole as the section."""
    raw = path or os.environ.get(ENV_CONFIG)
    if not raw:
        return {}
    p = Path(raw)
    text = p.read_text(encoding="utf-8")
    data = tomllib.loads(text) if p.suffix == ".toml" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a table / mapping")
    return dict(data.get(section, data)) if section in data or not _has_sections(data) else {}


def _has_sections(data: dict) -> bool:
    return any(k in data for k in ("simulate", "whatif", "report"))


def load_config(path: str | Path | None = None, **overrides: object) -> SimConfig:
    """SimConfig from defaults, the file's `[simulate]` section, then `overrides` (None ignored).

    A category given in the file replaces only the fields it names."""
    data = read_config_file(path, "simulate")
    cats = _default_categories()
    for name, fields in (data.pop("categories", None) or {}).items():
        cat = Category(name)
        base = cats.get(cat, CategoryRates()).model_dump()
        cats[cat] = CategoryRates(**(base | dict(fields)))
    data.update({k: v for k, v in overrides.items() if v is not None})
    return SimConfig(**data, categories=cats)

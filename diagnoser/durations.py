"""Durations as people type them: `90`, `90s`, `10m`, `1.5h`, `2d`, `1h30m`, and Slurm's forms
(`MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`, e.g. `00:10:00`, `1-00:00:00`).

A bare number is seconds (unlike Slurm's `--time`, where it is minutes): `--hang-timeout 90` has always
meant 90 s here.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NUMBER = r"[0-9]*\.?[0-9]+(?:e[+-]?\d+)?"
_UNIT_PART = re.compile(rf"({_NUMBER})\s*([smhd]?)")
_UNIT_FORM = re.compile(rf"(?:{_NUMBER}\s*[smhd]?\s*)+")
_SLURM_FORM = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
EXAMPLES = "e.g. 90s, 10m, 1.5h, 2d, 1h30m, 00:10:00, 1-00:00:00"


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError naming the accepted forms when it is not a duration."""
    raw = str(text).strip().lower()
    if ":" in raw or "-" in raw:
        slurm = _SLURM_FORM.fullmatch(raw)
        if slurm:
            return _slurm_seconds(*slurm.groups())
    elif raw and _UNIT_FORM.fullmatch(raw):
        parts = _UNIT_PART.findall(raw)
        if len(parts) == 1 or all(unit for _, unit in parts):  # "1h30m", not "1 30"
            return sum(float(n) * UNITS[unit or "s"] for n, unit in parts)
    raise ValueError(f"not a duration: {text!r} ({EXAMPLES})")


def _slurm_seconds(days: str | None, first: str, second: str | None, third: str | None) -> float:
    """Slurm's `--time` forms; without days `A:B` is minutes:seconds, with days `D-A:B` is hours:minutes."""
    numbers = [int(x) for x in (first, second, third) if x is not None]
    if days is None:  # MM:SS or HH:MM:SS
        h, m, s = ([0, 0] + numbers)[-3:]
    else:
        h, m, s = (numbers + [0, 0])[:3]
    return float(int(days or 0) * 86400 + h * 3600 + m * 60 + s)


def format_duration(seconds: float) -> str:
    """A short human form: `45s`, `12m`, `3.5h`, `2.1d`."""
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:.3g}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g}h"
    return f"{seconds / 86400:.3g}d"


def _seconds_value(value: object) -> object:
    """Pydantic before-validator: a duration string in any form above becomes seconds; numbers pass."""
    return parse_duration(value) if isinstance(value, str) else value


# a settings field in seconds that also takes "15m", "1h30m", "00:10:00" (files and DIAGNOSER_* variables)
Seconds = Annotated[float, BeforeValidator(_seconds_value)]

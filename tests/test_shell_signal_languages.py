"""A shell prints how a job died in the user's language (glibc's strsignal translations): a run on a
Chinese or German workstation gets the same verdict as one in English."""

from __future__ import annotations

from pathlib import Path

import pytest
from triage_support import triage_files

STEPS = "[2025-03-04 05:06:01] step 1200 loss 2.113 lr 3.0e-4\n[2025-03-04 05:06:09] step 1210 loss 2.108 lr 3.0e-4\n"

SAME_DEATH_IN_TWO_LANGUAGES = [
    ("Killed\n", "已杀死\n"),
    ("./train.sh: line 12: 48213 Killed                  python train.py --bs 64\n",
     "./train.sh: Zeile 12: 48213 Getötet                 python train.py --bs 64\n"),
    ("Segmentation fault (core dumped)\n", "段错误 (核心已转储)\n"),
    ("Bus error (core dumped)\n", "总线错误 (核心已转储)\n"),
    ("Aborted (core dumped)\n", "Abgebrochen (Speicherabzug geschrieben)\n"),
]


@pytest.mark.parametrize(("english", "translated"), SAME_DEATH_IN_TWO_LANGUAGES)
def test_a_translated_shell_status_gets_the_english_verdict(tmp_path: Path, english: str, translated: str):
    en = triage_files(tmp_path / "en", {"train.log": STEPS + english})
    other = triage_files(tmp_path / "other", {"train.log": STEPS + translated})
    assert en.rule  # the English line is known vocabulary
    assert (other.category, other.action, other.subtype, other.rule) == (en.category, en.action, en.subtype, en.rule)


def test_a_translated_word_inside_ordinary_output_is_not_a_death(tmp_path: Path):
    log = STEPS + "[2025-03-04 05:06:12] eval: Morto il processo di valutazione? no, step 1220 Abgebrochen=0\n"
    assert triage_files(tmp_path, {"train.log": log}).rule is None

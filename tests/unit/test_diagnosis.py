"""The diagnosis: every kind it can name is explained where a user reads the verdict (the README's
table and the manual's, docs/results.md, neither listing a kind that does not exist), and the
signal checks name a share of bad answers only when it rose with load."""

import re
from pathlib import Path

import pytest

from tts_knee.analysis.diagnosis import SIGNAL_RISE, common_evidence
from tts_knee.runformat.summary import DiagnosisKind

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_the_kinds_table_lists_every_kind(page):
    text = (ROOT / page).read_text()
    table = text[text.index("| kind | what it means |") :]
    table = table[: table.index("\n\n")]
    listed = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)
    assert sorted(listed) == sorted(DiagnosisKind)


@pytest.mark.parametrize(
    "key, words", [("runaway_rate", "ran away"), ("silent_rate", "were silent"), ("truncated_rate", "were cut short")]
)
def test_a_bad_answer_share_is_named_once_it_rises_past_the_lowest_steps(key, words):
    # one runaway in 34 at 1 and one in 32 at 2 (the piper demo's): the same share, not named
    steps = [
        {"concurrency": 1, "requests": 34, key: 1 / 34},
        {"concurrency": 2, "requests": 32, key: 1 / 32},
        {"concurrency": 4, "requests": 38, key: 1 / 34 + SIGNAL_RISE * 0.9},
    ]
    assert not [e for e in common_evidence(steps, {}, True) if words in e]
    steps.append({"concurrency": 8, "requests": 31, key: 1 / 34 + SIGNAL_RISE})
    named = [e for e in common_evidence(steps, {}, True) if words in e]
    assert len(named) == 1 and named[0].startswith("At concurrency 8 ")

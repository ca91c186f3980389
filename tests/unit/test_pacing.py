"""Text paced as a language model writes it (locustfiles/inputs/pacing.py), and the listener timed
against it (locustfiles/timeline.py): tokens, due times, coalescing a late sender's pieces,
flushes at sentence ends, and the record's text fields."""

import random

import pytest
from hypothesis import given, strategies as st

from tts_knee.locustfiles.inputs.pacing import Pacer, Piece, ends_sentence, schedule, tokens
from tts_knee.locustfiles.timeline import Timeline


def test_a_token_is_a_word_with_its_trailing_space():
    assert tokens("Hello there.  How are you?") == ["Hello ", "there.  ", "How ", "are ", "you?"]
    assert tokens("  leading space") == ["  leading ", "space"]
    assert tokens("") == []


def test_scripts_without_spaces_go_a_character_at_a_time_with_their_punctuation():
    assert tokens("你好。我来了！") == ["你", "好。", "我", "来", "了！"]
    assert tokens("Mixed 中文 text!") == ["Mixed ", "中", "文 ", "text!"]


@given(st.text(max_size=60))
def test_the_tokens_joined_are_the_text(text):
    assert "".join(tokens(text)) == text


def test_sentence_ends_include_closing_quotes_and_cjk_stops():
    assert [ends_sentence(t) for t in ("there. ", '"Quoted." ', "you?", "了！", "word ", "3.5 ", "(aside.) ")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        True,
    ]


def test_without_a_rate_the_whole_text_goes_at_once():
    assert schedule("Hello there. Bye.", None) == [Piece("Hello there. Bye.", 0.0, True, True)]
    assert schedule("Hello there. Bye.", 0) == schedule("Hello there. Bye.", None)


def test_tokens_are_due_one_per_interval():
    pieces = schedule("One two. Three four", 20)
    assert [p.text for p in pieces] == ["One ", "two. ", "Three ", "four"]
    assert [p.due_s for p in pieces] == pytest.approx([0.0, 0.05, 0.10, 0.15])
    assert [p.sentence_end for p in pieces] == [False, True, False, False]
    assert [p.last for p in pieces] == [False, False, False, True]


def test_jitter_keeps_each_gap_within_its_fraction_and_is_reproducible():
    text = " ".join(["word"] * 200)
    pieces = schedule(text, 10, jitter=0.5, rng=random.Random(7))
    gaps = [b.due_s - a.due_s for a, b in zip(pieces, pieces[1:])]
    assert min(gaps) >= 0.05 - 1e-9 and max(gaps) <= 0.15 + 1e-9
    assert max(gaps) - min(gaps) > 0.05  # it does vary
    assert sum(gaps) / len(gaps) == pytest.approx(0.1, rel=0.1)
    assert pieces == schedule(text, 10, jitter=0.5, rng=random.Random(7))


def test_a_sender_on_time_sends_each_piece_alone_when_due():
    pacer = Pacer(schedule("a b c", 10), start=100.0)
    assert pacer.take(100.0).text == "a "
    assert pacer.take(100.05) is None and pacer.wait_s(100.05) == pytest.approx(0.05)
    assert pacer.take(100.1).text == "b "
    last = pacer.take(100.2)
    assert (last.text, last.pieces, last.last) == ("c", 1, True)
    assert pacer.done and pacer.take(101.0) is None and pacer.wait_s(101.0) is None


def test_a_late_sender_coalesces_what_is_due_into_one_send():
    pacer = Pacer(schedule("a b c d e", 10), start=0.0)
    assert pacer.take(0.0).text == "a "
    late = pacer.take(0.35)  # b, c and d were due by now
    assert (late.text, late.pieces, late.last) == ("b c d ", 3, False)
    assert pacer.take(0.39) is None and pacer.take(0.4).text == "e"


def test_flushing_per_sentence_stops_a_send_at_each_sentence_end():
    pacer = Pacer(schedule("One two. Three. Four", 10), start=0.0, flush_sentences=True)
    first = pacer.take(10.0)  # everything is due, but a send ends at a sentence's end
    assert (first.text, first.flush, first.last) == ("One two. ", True, False)
    second = pacer.take(10.0)
    assert (second.text, second.flush) == ("Three. ", True)
    third = pacer.take(10.0)
    assert (third.text, third.flush, third.last) == ("Four", False, True)
    # without per-sentence flushes, the same late sender sends it all at once
    whole = Pacer(schedule("One two. Three. Four", 10), start=0.0).take(10.0)
    assert (whole.text, whole.flush, whole.last) == ("One two. Three. Four", False, True)


def test_the_last_sentence_is_ended_not_flushed():
    pacer = Pacer(schedule("Hi. Bye.", 100), start=0.0, flush_sentences=True)
    sends = [pacer.take(1.0), pacer.take(1.0)]
    assert [(s.text, s.flush, s.last) for s in sends] == [("Hi. ", True, False), ("Bye.", False, True)]


def test_a_minimum_interval_spaces_the_sends():
    pacer = Pacer(schedule("a b c d", 100), start=0.0, min_interval_s=0.1)
    assert pacer.take(0.0).text == "a "
    assert pacer.take(0.05) is None and pacer.wait_s(0.05) == pytest.approx(0.05)
    assert pacer.take(0.1).text == "b c d"  # what came due meanwhile goes together


def test_sends_sleeps_until_each_is_due():
    now = [5.0]
    slept = []

    def sleep(s):
        slept.append(round(s, 6))
        now[0] += s

    sends = list(Pacer(schedule("a b c", 4), start=5.0).sends(lambda: now[0], sleep))
    assert [s.text for s in sends] == ["a ", "b ", "c"] and slept == [0.25, 0.25]


def _timeline(text_at, audio_at, last_at):
    tl = Timeline()
    for at in text_at:
        tl.text_sent(at, at == last_at)
    for at in audio_at:
        tl.add(at, 100.0)
    return tl


def test_ttfa_counts_from_the_first_text_and_the_tail_from_the_end_of_it():
    # connected at 0, text from 0.05 to 0.45, audio from 0.25 to 0.95
    tl = _timeline([0.05, 0.25, 0.45], [0.25, 0.35, 0.45, 0.55, 0.95], 0.45)
    f = tl.fields(0.0, 0.0, False)
    assert f["ttfa_ms"] == pytest.approx(200.0)
    assert (f["text_first_ms"], f["text_done_ms"]) == pytest.approx((50.0, 450.0))
    assert f["done_to_audio_ms"] == 0.0  # audio was already flowing when the text was done
    assert f["tail_ms"] == pytest.approx(500.0)


def test_audio_that_starts_after_the_text_is_done_is_waited_for():
    f = _timeline([0.0, 0.1], [0.4, 0.5], 0.1).fields(0.0, 0.0, False)
    assert f["done_to_audio_ms"] == pytest.approx(300.0) and f["tail_ms"] == pytest.approx(400.0)


def test_a_whole_text_sent_at_t0_has_no_text_fields():
    tl = Timeline()
    tl.add(0.2, 100.0)
    f = tl.fields(0.0, 0.0, False)
    assert f["ttfa_ms"] == pytest.approx(200.0)
    assert not {"text_first_ms", "text_done_ms", "done_to_audio_ms", "tail_ms", "connect_ms"} & set(f)
    assert tl.text_fields(0.0) == {}


def test_the_session_opening_comes_with_the_first_text():
    tl = Timeline()
    tl.text_sent(0.05, False, 12.3456)
    tl.text_sent(0.1, True, 99.0)  # only the first send can have opened the session
    assert tl.text_fields(0.0)["connect_ms"] == 12.346
    assert _timeline([0.1], [], None).text_fields(0.0)["connect_ms"] is None  # it went on an open one


def test_text_that_never_ended_and_no_audio_leave_the_figures_null():
    tl = _timeline([0.1], [], None)
    assert tl.text_fields(0.0) == {"text_first_ms": pytest.approx(100.0), "text_done_ms": None, "connect_ms": None}
    f = tl.fields(0.0, 0.0, False)
    assert f["ttfa_ms"] is None and f["done_to_audio_ms"] is None and f["tail_ms"] is None

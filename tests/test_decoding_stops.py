"""StopStrings: streamed stop sequences behave exactly like searching the whole text."""

from __future__ import annotations

import itertools

from hypothesis import example, given
from hypothesis import strategies as st

from chatfmt.decoding import StopStrings as StopMatcher

alphabet = st.sampled_from("abAB \n<|>")


def reference(text: str, stops: list[str]) -> tuple[str, bool]:
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


@given(
    text=st.text(alphabet, max_size=40),
    stops=st.lists(st.text(alphabet, min_size=1, max_size=5), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=8),
)
@example(text="x<ab>", stops=["<ab>", "ab"], cuts=[4])
@example(text="x<abB", stops=["<ab>", "ab"], cuts=[4])
def test_any_chunking_matches_whole_text(text: str, stops: list[str], cuts: list[int]) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    matcher = StopMatcher(stops)
    out: list[str] = []
    hit = False
    for a, b in itertools.pairwise(bounds):
        emitted, hit = matcher.feed(text[a:b])
        out.append(emitted)
        if hit:
            break
    if not hit:
        emitted, hit = matcher.flush()
        out.append(emitted)
    assert ("".join(out), hit) == reference(text, stops)
    # The sequence reported is one that starts where the text was cut (the first given there).
    cut = len("".join(out))
    expected = next((s for s in stops if s and text.startswith(s, cut)), None) if hit else None
    assert matcher.matched == expected


def test_the_stop_that_starts_first_wins_even_if_another_completes_first() -> None:
    m = StopMatcher(["</answer>", "answer"])
    assert m.feed("x</answer") == ("x", False)  # "answer" is complete, "</answer>" may be too
    assert m.feed(">") == ("", True)
    m = StopMatcher(["</answer>", "answer"])
    assert m.feed("x</answer") == ("x", False)
    assert m.feed("!") == ("</", True)  # "</answer>" failed: "answer" was the first stop
    m = StopMatcher(["<ab>", "ab"])
    assert m.feed("x<ab") == ("x", False)
    assert m.flush() == ("<", True)  # the end of the output decides
    assert m.matched == "ab"


def test_held_text_is_released_when_the_match_fails() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("abc ST") == ("abc ", False)
    assert m.feed("OX") == ("STOX", False)
    assert m.feed("x STO") == ("x ", False)
    assert m.feed("P tail") == ("", True)


def test_the_decoder_names_the_stop_string_that_ended_the_turn() -> None:
    from chatfmt.decoding import TurnDecoder
    from chatfmt.dialects import get_dialect

    decoder = TurnDecoder(get_dialect("chatml"), stop_strings=["END", "STOP"])
    decoder.feed_text("hello ST")
    assert decoder.stop_string is None  # not decided yet
    decoder.feed_text("OP and more")
    assert decoder.stopped_by == "string" and decoder.stop_string == "STOP"
    assert decoder.result().content == "hello "
    # A turn that ended at its stop token names none.
    decoder = TurnDecoder(get_dialect("chatml"), stop_strings=["END"])
    decoder.feed_text("hello<|im_end|>")
    assert decoder.stopped_by == "control" and decoder.stop_string is None

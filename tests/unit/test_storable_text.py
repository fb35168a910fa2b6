import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox.storable_text import DEFAULT_LIMIT, storable_text

# Every code point, surrogates included, with the troublesome ones drawn often. Texts are lists
# joined, because st.text() would merge the alphabet into one range and almost never pick them.
hostile_characters = st.one_of(
    st.characters(exclude_categories=()),
    st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"]),
)
hostile_texts = st.lists(hostile_characters).map("".join)
# Longer than the cut mark, so that a limit below the length sometimes leaves room for it.
long_hostile_texts = st.lists(hostile_characters, min_size=30, max_size=300).map("".join)


def test_ordinary_text_is_kept_as_it_is() -> None:
    text = "KeyError: 'customer' — Zoë \U0001f600 [/] \t\n"
    assert storable_text(text) == text


def test_nul_characters_are_removed() -> None:
    assert storable_text("a\x00b\x00\x00c") == "abc"


def test_lone_surrogates_become_replacement_characters() -> None:
    assert storable_text("a\ud800b\udfffc\udc80") == "a\ufffdb\ufffdc\ufffd"


def test_a_surrogate_pair_becomes_the_character_it_encodes() -> None:
    assert storable_text("smile \ud83d\ude00, then é") == "smile \U0001f600, then é"


def test_long_text_keeps_its_head_and_says_how_much_was_cut() -> None:
    text = "x" * 10 + "y" * 100_000
    stored = storable_text(text)
    assert len(stored) <= DEFAULT_LIMIT
    assert stored.startswith("x" * 10 + "y" * 1000)
    cut = len(text) - stored.index("...")
    assert stored.endswith(f"... [cut {cut} characters]")


def test_text_exactly_at_the_limit_is_not_cut() -> None:
    assert storable_text("z" * 50, limit=50) == "z" * 50


def test_a_limit_too_small_for_the_mark_keeps_only_the_head() -> None:
    assert storable_text("abcdefghij" * 10, limit=5) == "abcde"


def test_a_negative_limit_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        storable_text("x", limit=-1)


@given(hostile_texts)
def test_any_text_becomes_storable(text: str) -> None:
    stored = storable_text(text)
    stored.encode()  # raises UnicodeEncodeError on a surrogate left behind
    assert "\x00" not in stored
    assert len(stored) <= DEFAULT_LIMIT


@given(long_hostile_texts, st.data())
def test_a_cut_text_is_storable_and_within_the_limit(text: str, data: st.DataObject) -> None:
    limit = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
    stored = storable_text(text, limit)
    stored.encode()
    assert "\x00" not in stored
    assert len(stored) <= limit


# Surrogates excluded: those that stand alone are replaced (tested above), not kept.
@given(st.text(st.one_of(st.characters(exclude_categories=["Cs"]), st.just("\x00"))))
def test_text_within_the_limit_loses_only_its_nul_characters(text: str) -> None:
    assert storable_text(text, limit=len(text)) == text.replace("\x00", "")

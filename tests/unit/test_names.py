"""What a publication or subscription name (check_name) and a message type, id or key
(check_text) may be, and the ids the writer makes when none is given."""

import uuid

import pytest

from outbox import messages
from outbox.errors import InvalidMessageError
from outbox.messages import (
    check_name,
    check_name_once,
    check_text,
    check_text_once,
    fresh_message_id,
)
from outbox.names import MAX_NAME_LENGTH


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "must not be empty"),
        ("   ", "is only whitespace"),
        ("\u3000\u00a0", "is only whitespace"),  # ideographic and no-break spaces
        ("\t\n", "a control character (U+0009) at index 0"),
        ("p" * (MAX_NAME_LENGTH + 1), "the limit is 200"),
        ("a\x00b", "contains \\u0000"),
        ("ord\ud800ers", "a lone surrogate (U+D800) at index 3"),
        ("ord\ters", "a control character (U+0009) at index 3"),
        ("orders\n", "a control character (U+000A) at index 6"),
        ("ord\x1bers", "a control character (U+001B)"),
        ("ord\x7fers", "a control character (U+007F)"),
        ("ord\x85ers", "a control character (U+0085)"),  # C1: next line
        ("ord\x9bers", "a control character (U+009B)"),  # C1: escape sequence introducer
        ("ord\u202eers", "an invisible format character (U+202E)"),  # right-to-left override
        ("ord\u200bers", "an invisible format character (U+200B)"),  # zero-width space
        ("\ufefforders", "an invisible format character (U+FEFF)"),  # byte order mark
        ("ord\u2028ers", "a line separator (U+2028)"),
        ("ord\u2029ers", "a paragraph separator (U+2029)"),
        (" orders", "starts or ends with whitespace"),
        ("orders ", "starts or ends with whitespace"),
        ("orders\u00a0", "starts or ends with whitespace"),  # no-break space
        ("\u3000orders", "starts or ends with whitespace"),  # ideographic space
    ],
)
def test_a_bad_name_is_refused_saying_why(name: str, reason: str) -> None:
    with pytest.raises(InvalidMessageError) as refused:
        check_name("publication", name)
    assert refused.value.field == "publication"
    assert reason in str(refused.value)


def test_the_refusal_shows_the_name_with_its_controls_escaped() -> None:
    with pytest.raises(InvalidMessageError) as refused:
        check_name("subscription", "billing\r\n\x1b[2J")
    assert str(refused.value).startswith("subscription='billing\\r\\n\\x1b[2J': ")


@pytest.mark.parametrize(
    "name",
    [
        "orders",
        "[/]",  # rich markup: escaped where it is printed
        "o'rders; DROP TABLE x;--",  # every statement is parameterised
        'say "hi"',
        "billing v2",
        "ørders-ünïcode",
        "注文",
        "a\u00a0b",  # a no-break space inside is visible as a space
        "\ue000",  # private use: not printable to Python, yet nothing hidden
        "p" * MAX_NAME_LENGTH,
    ],
)
def test_a_good_name_is_returned_as_given(name: str) -> None:
    assert check_name("publication", name) == name


@pytest.mark.parametrize("text", ["id\twith tab", " padded ", "line\nbreak", "\u202eabc"])
def test_ids_and_keys_only_need_to_be_storable(text: str) -> None:
    # Message ids and partition keys come from other systems; only what PostgreSQL cannot
    # store is refused.
    assert check_text("message_id", text) == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("\ud800", "a lone surrogate (U+D800) at index 0, which UTF-8 cannot encode"),
        ("key-é\udfff", "a lone surrogate (U+DFFF) at index 5"),
        ("a\x00", "contains \\u0000"),
        (7, "must be a str, not int"),
    ],
)
def test_ids_and_keys_postgresql_cannot_store_are_refused(text: object, reason: str) -> None:
    with pytest.raises(InvalidMessageError) as refused:
        check_text("partition_key", text)
    assert reason in str(refused.value)


def test_a_fresh_message_id_is_a_random_uuid_as_text() -> None:
    made = {fresh_message_id() for _ in range(1000)}
    assert len(made) == 1000
    for text in made:
        parsed = uuid.UUID(text)
        assert (str(parsed), parsed.version, parsed.variant) == (text, 4, uuid.RFC_4122)


def test_a_name_that_passed_once_is_not_checked_again_but_a_bad_one_always_is() -> None:
    assert check_name_once("publication", "orders") == "orders"
    assert check_name_once("publication", "orders") == "orders"
    for _ in range(2):
        with pytest.raises(InvalidMessageError):
            check_name_once("publication", "orders\n")
        with pytest.raises(InvalidMessageError):
            check_text_once("message_type", "")


def test_the_names_remembered_stay_bounded() -> None:
    for index in range(3000):
        check_text_once("message_type", f"Type{index}")
    assert 0 < len(messages._PASSED_TEXTS) <= messages._MAX_REMEMBERED

"""Settings validation and their stored JSON form."""

import json

import pytest

from poller.subscription import Strategy, SubscriptionSettings

REQUIRED = {"strategy": "pinned", "consumers": 2, "max_in_flight": 4}


def test_defaults_match_the_documented_ones() -> None:
    settings = SubscriptionSettings.from_mapping(REQUIRED)
    assert settings == SubscriptionSettings(Strategy.PINNED, consumers=2, max_in_flight=4)
    assert (settings.message_timeout, settings.max_retry_count) == (30.0, 10)
    assert (settings.retry_backoff_initial, settings.retry_backoff_max) == (0.1, 10.0)
    assert (settings.read_batch_size, settings.buffer_size) == (500, 1000)
    assert (settings.checkpoint_after, settings.min_checkpoint_count) == (2.0, 10)
    assert settings.max_checkpoint_count == 1000


def test_settings_round_trip_through_json() -> None:
    settings = SubscriptionSettings(
        Strategy.DISPATCH_TO_SINGLE, consumers=3, max_in_flight=7, message_timeout=12.5
    )
    stored = json.dumps(settings.to_mapping())
    assert json.loads(stored)["strategy"] == "dispatch-to-single"
    assert SubscriptionSettings.from_mapping(json.loads(stored)) == settings


def test_an_unknown_key_is_named() -> None:
    with pytest.raises(ValueError, match="unknown subscription setting 'max_inflight'"):
        SubscriptionSettings.from_mapping({**REQUIRED, "max_inflight": 3})


def test_a_missing_key_is_named() -> None:
    with pytest.raises(ValueError, match="missing subscription setting 'consumers'"):
        SubscriptionSettings.from_mapping({"strategy": "pinned", "max_in_flight": 1})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("strategy", "sticky"),
        ("consumers", 0),
        ("consumers", True),
        ("consumers", 1.5),
        ("max_in_flight", 0),
        ("max_in_flight", "4"),
        ("message_timeout", 0),
        ("message_timeout", float("inf")),
        ("max_retry_count", 0),
        ("retry_backoff_initial", -0.1),
        ("retry_backoff_max", float("nan")),
        ("read_batch_size", 0),
        ("buffer_size", -1),
        ("checkpoint_after", -1),
        ("checkpoint_after", False),
        ("min_checkpoint_count", 0),
        ("max_checkpoint_count", None),
    ],
)
def test_a_bad_value_is_an_error_naming_field_and_value(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{field} .*{_escaped(value)}"):
        SubscriptionSettings.from_mapping({**REQUIRED, field: value})


def test_related_limits_must_be_ordered() -> None:
    with pytest.raises(ValueError, match=r"retry_backoff_max \(0\.05\) must be >= "):
        SubscriptionSettings.from_mapping({**REQUIRED, "retry_backoff_max": 0.05})
    with pytest.raises(ValueError, match=r"max_checkpoint_count \(5\) must be >= min"):
        SubscriptionSettings.from_mapping({**REQUIRED, "max_checkpoint_count": 5})


def _escaped(value: object) -> str:
    return repr(value).replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")

"""Settings validation, their metadata, and their stored JSON form."""

import dataclasses
import json

import pytest

from poller.subscription import SETTINGS, SettingSpec, Strategy, SubscriptionSettings
from tests.support.documentation import page

REQUIRED = {"strategy": "pinned", "consumers": 2, "max_in_flight": 4}


def test_defaults_match_the_documented_ones() -> None:
    settings = SubscriptionSettings.from_mapping({})
    assert settings == SubscriptionSettings()
    # One consumer with one message in flight: strictly in order unless told otherwise.
    assert (settings.strategy, settings.consumers, settings.max_in_flight) == (
        Strategy.ROUND_ROBIN,
        1,
        1,
    )
    assert (settings.message_timeout, settings.max_retry_count) == (30.0, 10)
    assert (settings.retry_backoff_initial, settings.retry_backoff_max) == (0.1, 10.0)
    assert (settings.read_batch_size, settings.buffer_size) == (500, 1000)
    assert (settings.checkpoint_after, settings.min_checkpoint_count) == (2.0, 10)
    assert settings.max_checkpoint_count == 1000


def test_a_missing_key_takes_its_default() -> None:
    settings = SubscriptionSettings.from_mapping({"consumers": 3})
    assert settings == SubscriptionSettings(consumers=3)


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


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("strategy", "sticky"),
        ("consumers", 0),
        ("consumers", True),
        ("consumers", 1.5),
        ("consumers", 1025),
        ("consumers", 2147483648),  # the daemon died of MemoryError
        ("consumers", 99999999999999999999),
        ("max_in_flight", 0),
        ("max_in_flight", "4"),
        ("max_in_flight", 10001),
        ("message_timeout", 0),
        ("message_timeout", 1e-300),
        ("message_timeout", 604801),
        ("message_timeout", float("inf")),
        ("max_retry_count", 0),
        ("max_retry_count", 1001),
        ("retry_backoff_initial", -0.1),
        ("retry_backoff_max", float("nan")),
        ("read_batch_size", 0),
        ("read_batch_size", 100001),
        ("buffer_size", -1),
        ("buffer_size", 1000001),
        ("checkpoint_after", -1),
        ("checkpoint_after", False),
        ("min_checkpoint_count", 0),
        ("max_checkpoint_count", None),
        ("max_checkpoint_count", 1000001),
    ],
)
def test_a_bad_value_is_an_error_naming_field_and_value(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{field} .*{_escaped(value)}"):
        SubscriptionSettings.from_mapping({**REQUIRED, field: value})


def test_related_limits_must_be_ordered_and_the_refusal_names_both_values() -> None:
    with pytest.raises(
        ValueError,
        match=r"^retry_backoff_initial \(0\.1\) must not exceed retry_backoff_max \(0\.05\);"
        r" to go past it, set retry_backoff_max too$",
    ):
        SubscriptionSettings.from_mapping({**REQUIRED, "retry_backoff_max": 0.05})
    with pytest.raises(
        ValueError, match=r"^min_checkpoint_count \(10\) must not exceed max_checkpoint_count \(5\)"
    ):
        SubscriptionSettings.from_mapping({**REQUIRED, "max_checkpoint_count": 5})
    assert SubscriptionSettings(retry_backoff_initial=604_800, retry_backoff_max=604_800)


def test_every_field_has_one_spec_with_its_default() -> None:
    fields = dataclasses.fields(SubscriptionSettings)
    assert [spec.name for spec in SETTINGS] == [field.name for field in fields]
    for spec, field in zip(SETTINGS, fields, strict=True):
        assert spec.default == field.default
        assert spec.description
        assert spec.help.startswith(spec.description)
    strategy = SETTINGS[0]
    assert strategy.choices == ("round-robin", "dispatch-to-single", "pinned")
    assert "default round-robin" in strategy.help


@pytest.mark.parametrize("spec", [spec for spec in SETTINGS if spec.minimum is not None])
def test_validation_uses_the_documented_bounds(spec: SettingSpec) -> None:
    """The bounds a CLI and the README show are the ones enforced: one source."""
    assert spec.minimum is not None
    assert spec.maximum is not None
    assert f"{spec.minimum}..{spec.maximum}" in spec.help
    for allowed in (spec.minimum, spec.maximum):
        _with(spec.name, allowed)
    step = 1 if spec.kind is int else 0.0005
    for refused in (spec.minimum - step, spec.maximum + step):
        with pytest.raises(ValueError, match=f"^{spec.name} must be .* got {refused!r}"):
            _with(spec.name, refused)


def test_checkpoint_after_may_be_zero() -> None:
    assert SubscriptionSettings(checkpoint_after=0).checkpoint_after == 0


def _with(name: str, value: object) -> SubscriptionSettings:
    """Settings with `value` for `name`, the related limits moved out of its way."""
    values: dict[str, object] = {name: value}
    if name == "retry_backoff_initial":
        values["retry_backoff_max"] = 604_800
    if name == "retry_backoff_max":
        values["retry_backoff_initial"] = 0.001
    if name == "min_checkpoint_count":
        values["max_checkpoint_count"] = 1_000_000
    if name == "max_checkpoint_count":
        values["min_checkpoint_count"] = 1
    return SubscriptionSettings.from_mapping(values)


def _escaped(value: object) -> str:
    return repr(value).replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")


def test_the_readme_table_shows_every_setting_as_the_settings_define_it() -> None:
    readme = page("reference/subscription-settings.md").read_text(encoding="utf-8")
    for spec in SETTINGS:
        default = spec.default.value if isinstance(spec.default, Strategy) else spec.default
        row = next(
            (line for line in readme.splitlines() if line.startswith(f"| `{spec.name}` |")), None
        )
        assert row is not None, f"reference/subscription-settings.md has no row for {spec.name}"
        assert f"| `{default}` | {spec.allowed} |" in row, row

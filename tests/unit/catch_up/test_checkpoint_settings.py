"""OUTBOX_CHECKPOINT_INTERVAL and OUTBOX_CHECKPOINT_TIMEOUT_SECS: defaults, overrides, and the
one-line refusal naming the variable (or argument) and the bad value."""

import pytest

import poller
from poller.catch_up.settings import (
    CheckpointSettings,
    CheckpointSettingsError,
    checkpoint_settings,
)
from tests.support.documentation import page


def test_the_defaults_are_100_messages_and_5_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUTBOX_CHECKPOINT_INTERVAL", raising=False)
    monkeypatch.delenv("OUTBOX_CHECKPOINT_TIMEOUT_SECS", raising=False)
    assert checkpoint_settings() == CheckpointSettings(
        checkpoint_interval=100, checkpoint_timeout_secs=5.0
    )


def test_the_environment_is_read_and_a_call_overrides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_CHECKPOINT_INTERVAL", "7")
    monkeypatch.setenv("OUTBOX_CHECKPOINT_TIMEOUT_SECS", "0.5")
    assert checkpoint_settings().checkpoint_interval == 7
    assert checkpoint_settings().checkpoint_timeout_secs == 0.5
    overridden = checkpoint_settings(3, 2)
    assert (overridden.checkpoint_interval, overridden.checkpoint_timeout_secs) == (3, 2.0)


@pytest.mark.parametrize(
    "variable", ["OUTBOX_CHECKPOINT_INTERVAL", "OUTBOX_CHECKPOINT_TIMEOUT_SECS"]
)
@pytest.mark.parametrize("value", ["0", "-3", "abc", "", "nan"])
def test_a_bad_variable_fails_at_start_up_naming_it_and_its_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(CheckpointSettingsError) as refused:
        poller.subscribe_sync("postgresql://nowhere.invalid/db", "orders")
    assert str(refused.value).startswith(f"{variable}={value!r} is refused")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"checkpoint_interval": 0}, "checkpoint_interval=0"),
        ({"checkpoint_interval": -1}, "checkpoint_interval=-1"),
        ({"checkpoint_interval": "5"}, "checkpoint_interval='5'"),
        ({"checkpoint_interval": 2.5}, "checkpoint_interval=2.5"),
        ({"checkpoint_timeout": 0}, "checkpoint_timeout=0"),
        ({"checkpoint_timeout": float("inf")}, "checkpoint_timeout=inf"),
    ],
)
def test_a_bad_argument_fails_at_the_call_naming_it(
    arguments: dict[str, object], named: str
) -> None:
    with pytest.raises(CheckpointSettingsError, match=f"^{named} is refused"):
        poller.subscribe("postgresql://nowhere.invalid/db", "orders", **arguments)  # type: ignore[arg-type]


def test_the_readme_table_shows_the_defaults_of_the_settings() -> None:
    readme = page("reference/configuration.md").read_text()
    for name, field in CheckpointSettings.model_fields.items():
        default = field.default
        shown = int(default) if float(default).is_integer() else default
        assert f"| `OUTBOX_{name.upper()}` | `{shown}` |" in readme

"""The role prefix: one default, which the SQL that runs without Python falls back to as well."""

import re
from pathlib import Path

import pytest

from outbox.queries import sql_directory
from outbox.roles import DEFAULT_ROLE_PREFIX, ROLE_PREFIX_SETTING, RoleNames, role_names
from outbox.schema_migrations import migrations_directory

FALLBACK = re.compile(r"current_setting\('([a-z_.]+)', true\), ''\), '([a-z_]+)'\)")


@pytest.mark.parametrize(
    "path",
    [sql_directory() / "schema.sql", migrations_directory() / "versions" / "0007_roles.py"],
    ids=lambda path: Path(path).name,
)
def test_sql_falls_back_to_the_default_prefix_through_the_same_setting(path: Path) -> None:
    fallbacks = FALLBACK.findall(path.read_text(encoding="utf-8"))
    assert fallbacks
    assert set(fallbacks) == {(ROLE_PREFIX_SETTING, DEFAULT_ROLE_PREFIX)}


def test_the_default_names() -> None:
    assert role_names() == RoleNames("outbox_writer", "outbox_poller", "outbox_reader")


@pytest.mark.parametrize("prefix", ["", "Shop", "1shop", "shop-eu", "a" * 57, 'x"; DROP'])
def test_a_prefix_that_is_not_a_plain_lower_case_name_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="role prefix"):
        role_names(prefix)


def test_the_longest_prefix_still_fits_an_identifier() -> None:
    assert len(role_names("a" * 56).writer) == 63

"""The retention table of the docs (how-to/retention.md) shows DaemonOptions' own defaults:
one source."""

import dataclasses
import re

from outbox_cli.option_fields import retention_fields
from poller.daemon import DaemonOptions
from tests.support.documentation import page


def test_the_readme_retention_table_matches_the_options() -> None:
    readme = page("how-to/retention.md").read_text(encoding="utf-8")
    names = [f.name for f in retention_fields()] + ["retention_interval"]
    for field in dataclasses.fields(DaemonOptions):
        if field.name not in names:
            continue
        flag = "--" + field.name.replace("_", "-")
        row = re.search(rf"^\| `{flag}` \| `([^`]*)` \|", readme, re.MULTILINE)
        assert row is not None, f"how-to/retention.md has no row for {flag}"
        assert row[1] == str(field.default), flag

"""The README's retention table shows DaemonOptions' own defaults: one source."""

import dataclasses
import re
from pathlib import Path

from outbox_cli.option_fields import retention_fields
from poller.daemon import DaemonOptions


def test_the_readme_retention_table_matches_the_options() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    names = [f.name for f in retention_fields()] + ["retention_interval"]
    for field in dataclasses.fields(DaemonOptions):
        if field.name not in names:
            continue
        flag = "--" + field.name.replace("_", "-")
        row = re.search(rf"^\| `{flag}` \| `([^`]*)` \|", readme, re.MULTILINE)
        assert row is not None, f"README has no row for {flag}"
        assert row[1] == str(field.default), flag

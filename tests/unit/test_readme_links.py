"""The README's links into the docs site name files that exist: GitHub resolves them from the
repository's root, and `mkdocs build --strict` checks only the pages under docs/."""

import re

from tests.support.documentation import PROJECT_ROOT, README

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_of_the_readme_names_a_file() -> None:
    targets = [t for t in LINK.findall(README.read_text()) if "://" not in t]
    assert len(targets) >= 20
    assert [t for t in targets if not (PROJECT_ROOT / t).is_file()] == []

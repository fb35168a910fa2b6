"""The documentation as tests read it: the README, the front door, and the site's pages under
docs/ (mkdocs.yml), so the snippets and tables they check are found wherever a page keeps them."""

from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]
README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"


class _NavLoader(yaml.SafeLoader):
    """mkdocs.yml names Python objects (`!!python/name:`) for its Markdown extensions; the nav
    needs none of them, so they load as None rather than being imported."""


_NavLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)


def page(name: str) -> Path:
    """A page of the site, by its path under docs/: `page("how-to/relays.md")`."""
    path = DOCS / name
    assert path.is_file(), f"docs/{name} is gone: a test reads it"
    return path


def pages() -> list[Path]:
    """The README, then every page of the site in the order of its nav (which keeps the order
    the README had when it held them all: the quickstart before the daemon, and so on)."""
    config = yaml.load((PROJECT_ROOT / "mkdocs.yml").read_text(encoding="utf-8"), _NavLoader)
    return [README, *(DOCS / name for name in _page_names(config["nav"]))]


def text() -> str:
    """The README and every page of the site, one after the other, in the nav's order."""
    return "\n".join(path.read_text(encoding="utf-8") for path in pages())


def _page_names(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [name for entry in nav for name in _page_names(entry)]
    return [name for entry in nav.values() for name in _page_names(entry)]

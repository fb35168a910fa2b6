"""The named SQL of sql/*.sql, loaded once.

Queries live in files so a DBA can read every statement the product runs, as in
procrastinate's queries.sql. A part several statements share (the columns of a message) is
written once in sql/fragments.sql and included as `{{name}}`.
"""

import re
from pathlib import Path
from typing import LiteralString

_BLOCK_START = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{([a-z_]+)\}\}")


def sql_directory() -> Path:
    """sql/ beside the packages in a checkout, or inside `outbox/` in an installed wheel."""
    packaged = Path(__file__).parent / "sql"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "sql"


def parse_queries(text: str, fragments: dict[str, str] | None = None) -> dict[str, LiteralString]:
    """Split `-- name --` blocks; the first comment line of each block is its description.
    `{{name}}` in a block is replaced by the fragment of that name."""
    queries: dict[str, LiteralString] = {}
    starts = list(_BLOCK_START.finditer(text))
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        body_lines = text[start.end() : end].strip().splitlines()
        statement = "\n".join(line for line in body_lines if not line.startswith("--")).strip()
        name = start.group(1)
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        # The files ship with the package, so each statement is a literal in all but syntax.
        queries[name] = _include(statement, fragments or {}, name)
    return queries


def load_queries(file_name: str) -> dict[str, LiteralString]:
    """The named statements of one file of sql/, fragments included."""
    directory = sql_directory()
    fragments = parse_queries((directory / "fragments.sql").read_text(encoding="utf-8"))
    return parse_queries((directory / file_name).read_text(encoding="utf-8"), dict(fragments))


def _include(statement: str, fragments: dict[str, str], query: str) -> str:
    def fragment(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in fragments:
            raise ValueError(f"query {query!r} includes {{{{{name}}}}}, which is not a fragment")
        return fragments[name]

    return _INCLUDE.sub(fragment, statement)


QUERIES: dict[str, LiteralString] = load_queries("queries.sql")

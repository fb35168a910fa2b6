"""The named SQL of sql/queries.sql, loaded once.

Queries live in one file so a DBA can read every statement the product runs, as in
procrastinate's queries.sql.
"""

import re
from pathlib import Path
from typing import LiteralString


def sql_directory() -> Path:
    """sql/ beside the packages in a checkout, or inside `outbox/` in an installed wheel."""
    packaged = Path(__file__).parent / "sql"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "sql"


_BLOCK_START = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, LiteralString]:
    """Split `-- name --` blocks; the first comment line of each block is its description."""
    queries: dict[str, LiteralString] = {}
    starts = list(_BLOCK_START.finditer(text))
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        body_lines = text[start.end() : end].strip().splitlines()
        statement = "\n".join(line for line in body_lines if not line.startswith("--")).strip()
        name = start.group(1)
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in queries.sql")
        # The file ships with the package, so each statement is a literal in all but syntax.
        queries[name] = statement
    return queries


QUERIES: dict[str, LiteralString] = parse_queries(
    (sql_directory() / "queries.sql").read_text(encoding="utf-8")
)

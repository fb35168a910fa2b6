"""The wheel's top-level packages, and an application's module that would shadow one.

The wheel installs `outbox`, `poller` and the `outbox_*` packages at the top level of
site-packages. An application's own module or package of one of those names, on the import
path or beside its handler, is not what `import poller` (or `import outbox`) gets in a process
that already imported ours: the daemon's handler would call into our package, and every
message would park with an AttributeError. Or it comes first on the path, and the `outbox`
command cannot import its own. Either way it is refused at start, naming what to rename.

Standard library only, and none of the package's other modules: the `outbox` command checks
its path with it before it imports anything else of ours.
"""

import importlib.machinery
from collections.abc import Iterable
from pathlib import Path

OUR_PACKAGES = ("outbox", "poller", "outbox_relays", "outbox_spark", "outbox_cli", "outbox_console")
"""What the wheel installs (pyproject.toml's wheel packages; a unit test keeps them equal)."""

# Where the wheel put them: site-packages, or the checkout in a development install.
_INSTALLED_IN = Path(__file__).resolve().parents[1]


def shadowing_module(directories: Iterable[str]) -> Path | None:
    """The first module or package in `directories` (import path entries; "" is the current
    directory) named as one of ours that is not ours; None when there is none."""
    for directory in directories:
        for name in OUR_PACKAGES:
            found = importlib.machinery.PathFinder.find_spec(name, [directory or "."])
            if found is None or found.origin is None:
                continue  # none here, or a plain folder (a namespace portion: ours wins)
            origin = Path(found.origin).resolve()
            module = origin.parent if origin.name == "__init__.py" else origin
            if module != _INSTALLED_IN / name:
                return module
    return None


def shadowing_line(module: Path) -> str:
    """What the refusal says: the module, and what to rename."""
    kind = "package" if module.is_dir() else "module"
    name = module.name.partition(".")[0]
    return (
        f"{module} is a {kind} named {name}, the name of outbox-poller's own package, so"
        f" `import {name}` gets ours: rename yours (and its imports), e.g. to app_{module.name}"
    )

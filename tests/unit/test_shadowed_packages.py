"""An application's module named as one of our top-level packages is found, ours is not."""

import tomllib
from pathlib import Path

from outbox.shadowed_packages import OUR_PACKAGES, shadowing_line, shadowing_module
from tests.support.databases import PROJECT_ROOT


def test_our_packages_are_what_the_wheel_installs() -> None:
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    assert set(OUR_PACKAGES) == set(
        pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    )


def test_ours_shadow_nothing() -> None:
    assert shadowing_module([str(PROJECT_ROOT)]) is None


def test_a_module_and_a_package_of_our_names_are_found_and_a_plain_folder_is_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "poller").mkdir()  # no __init__.py: a namespace portion, which ours outranks
    assert shadowing_module([str(tmp_path)]) is None
    (tmp_path / "poller" / "__init__.py").write_text("")
    assert shadowing_module([str(tmp_path)]) == tmp_path / "poller"
    elsewhere = tmp_path / "lib"
    elsewhere.mkdir()
    (elsewhere / "outbox.py").write_text("")
    assert shadowing_module([str(PROJECT_ROOT), str(elsewhere)]) == elsewhere / "outbox.py"
    assert shadowing_line(elsewhere / "outbox.py") == (
        f"{elsewhere / 'outbox.py'} is a module named outbox, the name of outbox-poller's own"
        " package, so `import outbox` gets ours: rename yours (and its imports), e.g. to"
        " app_outbox.py"
    )

"""MJCF files shipped with ukjax, so that the importer can be tried from an installed package
(the repository's `examples/` holds the same files)."""

from pathlib import Path

_HERE = Path(__file__).parent


def names() -> list[str]:
    """The example files there are.

    **Returns:**

    Their names, sorted (`"contacts.xml"`, `"fourbar.xml"`, `"grasp.xml"`, `"gripper.xml"`).
    """
    return sorted(p.name for p in _HERE.glob("*.xml"))


def path(name: str) -> Path:
    """The path of a shipped example file, e.g. for `ukjax.models.from_mjcf`.

    **Arguments:**

    - `name`: the file's name, as `names()` lists it.

    **Returns:**

    The file's path inside the installed package.
    """
    found = _HERE / name
    if name not in names():
        raise FileNotFoundError(f"No example {name!r}; ukjax ships {names()}.")
    return found

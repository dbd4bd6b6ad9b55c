"""Where a task works: its target_path and its touches (DESIGN section 16), checked and normalised at enqueue.

Each is relative to the repository root and stays inside it; a touch is a path glob (server/touches.py says
what one covers). Imported by the workflow checker too, so it depends on nothing but the models.
"""

from __future__ import annotations

from server.core.models import Limits, check_text
from server.errors import invalid
from server.touches import normalise


def check_target_path(path: str) -> str:
    check_text(path, "target_path", Limits.PATH, required=False, single_line=True)
    normalised = path.strip().removeprefix("./")
    _check_relative(normalised, path, "target_path", "Give a path relative to the repository root.")
    return normalised


def _check_relative(normalised: str, given: str, field: str, relative: str) -> None:
    if normalised.startswith(("/", "\\")) or ":" in normalised[:3]:
        raise invalid(f"{field} {given!r} is absolute.", relative)
    if ".." in normalised.replace("\\", "/").split("/"):
        raise invalid(f"{field} {given!r} contains '..'.", "Give a path inside the repository, without '..'.")


def check_touches(patterns: object) -> list[str]:
    """The files a task will edit (DESIGN section 16): relative path globs, normalised (no `./`, no trailing
    `/`), each once. An empty list declares none."""
    if not isinstance(patterns, list):
        raise invalid("touches must be a list of path globs.", 'Send e.g. ["src/api/**", "docs/api.md"].')
    if len(patterns) > Limits.TOUCHES:
        raise invalid(
            f"touches has {len(patterns)} entries; the limit is {Limits.TOUCHES}.",
            "Name the directories (src/api) or globs (src/**/*.py) that hold the files, not each file.",
        )
    checked = []
    for n, pattern in enumerate(patterns):
        field = f"touches[{n}]"
        check_text(pattern, field, Limits.PATH, single_line=True)
        _check_relative(pattern.strip().removeprefix("./"), pattern, field, TOUCHES_HINT)
        normalised = normalise(pattern)
        if not normalised:
            raise invalid(f"{field} {pattern!r} names no path.", TOUCHES_HINT)
        checked.append(normalised)
    return list(dict.fromkeys(checked))


TOUCHES_HINT = (
    "Give paths or globs relative to the repository root: a file or directory (src/api), or a glob with *, ?, "
    "[...] and ** (src/**/*.py); ** alone is the whole repository."
)


def default_touches(target_path: str) -> list[str] | None:
    """What a task touches when it declares nothing: its target_path (a file or a directory), else nothing."""
    normalised = normalise(target_path)
    return [normalised] if normalised else None

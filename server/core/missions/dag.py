"""Dependency graphs given as key -> the keys it depends on (a mission's tasks, a workflow's steps)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of the dependency graph, as the keys along it (first key repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(key: str) -> list[str] | None:
        state[key] = 1
        path.append(key)
        for dep in graph.get(key, ()):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[key] = 2
        return None

    for key in graph:
        if key not in state and (found := visit(key)):
            return found
    return None

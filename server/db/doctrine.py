"""Doctrine statements: standing guidance by name (`namespace/name`), linked to issues or to a repository prefix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, RowMapping, delete, func, insert, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t

Values = dict[str, Any]


async def by_name(conn: AsyncConnection, namespace: str, name: str) -> RowMapping | None:
    d = t.doctrine_refs
    query = select(d).where(d.c.namespace == namespace, d.c.name == name)
    return (await conn.execute(query)).mappings().first()


async def by_names(conn: AsyncConnection, refs: Sequence[tuple[str, str]]) -> Sequence[RowMapping]:
    d = t.doctrine_refs
    if not refs:
        return []
    wanted = or_(*[(d.c.namespace == namespace) & (d.c.name == name) for namespace, name in refs])
    return (await conn.execute(select(d).where(wanted))).mappings().all()


async def listed(conn: AsyncConnection, namespace: str | None, limit: int) -> Sequence[RowMapping]:
    d = t.doctrine_refs
    query = select(d).order_by(d.c.namespace, d.c.name).limit(limit)
    if namespace is not None:
        query = query.where(d.c.namespace == namespace)
    return (await conn.execute(query)).mappings().all()


async def insert_doctrine(conn: AsyncConnection, values: Values) -> None:
    await conn.execute(insert(t.doctrine_refs).values(values))


async def update_doctrine(conn: AsyncConnection, doctrine_id: str, values: Values) -> None:
    await conn.execute(update(t.doctrine_refs).where(t.doctrine_refs.c.id == doctrine_id).values(values))


async def delete_doctrine(conn: AsyncConnection, doctrine_id: str) -> None:
    """The entry and its links to issues: briefings stop showing it."""
    await conn.execute(delete(t.issue_doctrine).where(t.issue_doctrine.c.doctrine_id == doctrine_id))
    await conn.execute(delete(t.doctrine_refs).where(t.doctrine_refs.c.id == doctrine_id))


async def link(conn: AsyncConnection, links: Sequence[Values]) -> None:
    if links:
        await conn.execute(insert(t.issue_doctrine).values(list(links)))


async def for_issue(conn: AsyncConnection, issue_id: str, repo: str | None) -> Sequence[RowMapping]:
    """The doctrine an issue's briefing shows: linked to it, or naming a prefix of its task's repository.

    The prefix is compared with substr, not LIKE, so `_` and `%` in a prefix are plain characters."""
    d, links = t.doctrine_refs, t.issue_doctrine
    linked = select(links.c.doctrine_id).where(links.c.issue_id == issue_id)
    wanted: ColumnElement[bool] = d.c.id.in_(linked)
    if repo:
        by_prefix = d.c.repo_prefix.is_not(None) & (
            func.substr(literal(repo), 1, func.length(d.c.repo_prefix)) == d.c.repo_prefix
        )
        wanted = or_(wanted, by_prefix)
    query = select(d).where(wanted).order_by(d.c.namespace, d.c.name)
    return (await conn.execute(query)).mappings().all()

"""Doctrine: named standing guidance (`myorg/code-style`) that briefings carry.

An entry reaches a task's briefing two ways: named at enqueue (`doctrine=[...]`, linked to the task's issue)
or by repository prefix (an entry with `repo_prefix="myorg/"` is in the briefing of every task of a
repository under it, whenever it was enqueued). Removing an entry takes it out of every briefing."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from server import uris
from server.core import results as r
from server.core.audit import AuditAction, audit_row
from server.core.models import Actor, Limits, check_text, new_id
from server.core.service import Core, check_limit
from server.db import doctrine as db
from server.db import queries
from server.errors import ErrorCode, JctError, invalid
from server.vocab import EntityKind

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
REF = re.compile(rf"({_PART})/({_PART})")
PREVIEW_CHARS = 200


class DoctrineEntry(r.Shape):
    ref: str
    uri: str
    repo_prefix: str | None = None
    body: str


class DoctrineList(r.Ok):
    doctrine: list[DoctrineEntry]
    count: int


def parse_ref(ref: object, field: str = "name") -> tuple[str, str]:
    if not isinstance(ref, str) or (found := REF.fullmatch(ref)) is None:
        raise invalid(
            f"{field} {ref!r} is not NAMESPACE/NAME.",
            "Name doctrine like myorg/code-style: letters, digits, '.', '_' or '-', up to 128 on each side.",
        )
    return found.group(1), found.group(2)


def check_refs(refs: object, field: str = "doctrine") -> list[str]:
    """Names given at enqueue, checked and deduplicated (in order)."""
    if refs is None:
        return []
    if not isinstance(refs, list):
        raise invalid(f"{field} must be a list of names.", 'Send e.g. ["myorg/code-style"].')
    if len(refs) > Limits.DOCTRINES:
        raise invalid(f"{field} names {len(refs)} entries; the limit is {Limits.DOCTRINES}.", "Name fewer.")
    for i, ref in enumerate(refs):
        parse_ref(ref, f"{field}[{i}]")
    return list(dict.fromkeys(refs))


def _missing(ref: str) -> JctError:
    return JctError(
        ErrorCode.DOCTRINE_NOT_FOUND,
        f"No doctrine named {ref!r}.",
        "List it with jct_manage_doctrine(action='list') or `jct doctrine list`; add it first with action='add'.",
    )


def _entry(row: RowMapping, preview: bool = False) -> DoctrineEntry:
    ref = f"{row['namespace']}/{row['name']}"
    body = row["body"]
    if preview and len(body) > PREVIEW_CHARS:
        body = body[:PREVIEW_CHARS] + f"… (cut; read {uris.doctrine(ref)})"
    return DoctrineEntry(ref=ref, uri=uris.doctrine(ref), repo_prefix=row["repo_prefix"], body=body)


def ref_view(row: RowMapping) -> r.DoctrineRef:
    return r.DoctrineRef(id=row["id"], namespace=row["namespace"], name=row["name"], body=row["body"])


async def add(core: Core, actor: Actor, ref: str, body: str, repo_prefix: str | None = None) -> DoctrineList:
    """Add an entry, or replace the body and prefix of the one with this name."""
    namespace, name = parse_ref(ref)
    body = check_text(body, "body", Limits.DOCTRINE_BODY)
    if repo_prefix is not None:
        repo_prefix = check_text(repo_prefix, "repo_prefix", Limits.REPO, single_line=True).strip() or None
    ts = core.now()
    values = {"body": body, "repo_prefix": repo_prefix, "updated_at": ts}
    async with core.db.write() as conn:
        existing = await db.by_name(conn, namespace, name)
        if existing is None:
            doctrine_id = new_id()
            await db.insert_doctrine(conn, {"id": doctrine_id, "namespace": namespace, "name": name, **values})
            action = AuditAction.DOCTRINE_ADDED
        else:
            doctrine_id = existing["id"]
            await db.update_doctrine(conn, doctrine_id, values)
            action = AuditAction.DOCTRINE_UPDATED
        after = {"ref": f"{namespace}/{name}", "repo_prefix": repo_prefix, "body_chars": len(body)}
        audit = audit_row(actor, action, EntityKind.DOCTRINE, doctrine_id, None, after, None)
        await queries.insert_audit(conn, [audit])
        row = await db.by_name(conn, namespace, name)
    assert row is not None
    return DoctrineList(doctrine=[_entry(row)], count=1)


async def show(core: Core, ref: str) -> DoctrineList:
    namespace, name = parse_ref(ref)
    async with core.db.read() as conn:
        row = await db.by_name(conn, namespace, name)
    if row is None:
        raise _missing(ref)
    return DoctrineList(doctrine=[_entry(row)], count=1)


async def list_doctrine(core: Core, namespace: str | None = None, limit: int = Limits.LIST) -> DoctrineList:
    """Every entry (bodies cut to a preview), by namespace and name."""
    check_limit(limit)
    if namespace is not None:
        check_text(namespace, "namespace", 128, single_line=True)
    async with core.db.read() as conn:
        rows = await db.listed(conn, namespace, limit)
    return DoctrineList(doctrine=[_entry(row, preview=True) for row in rows], count=len(rows))


async def remove(core: Core, actor: Actor, ref: str) -> DoctrineList:
    """Delete an entry: it leaves every briefing that showed it. Cannot be undone (add it again)."""
    namespace, name = parse_ref(ref)
    async with core.db.write() as conn:
        row = await db.by_name(conn, namespace, name)
        if row is None:
            raise _missing(ref)
        await db.delete_doctrine(conn, row["id"])
        before = {"ref": ref, "repo_prefix": row["repo_prefix"]}
        await queries.insert_audit(
            conn,
            [audit_row(actor, AuditAction.DOCTRINE_REMOVED, EntityKind.DOCTRINE, row["id"], before, None, None)],
        )
    return DoctrineList(doctrine=[_entry(row)], count=0)


async def link(conn: AsyncConnection, issues: Sequence[tuple[str, Sequence[str]]]) -> None:
    """Link issues to the doctrine they named at enqueue, inside the enqueue's transaction: an unknown name
    is DOCTRINE_NOT_FOUND and the whole enqueue is undone."""
    wanted = sorted({ref for _, refs in issues for ref in refs})
    if not wanted:
        return
    rows = await db.by_names(conn, [parse_ref(ref) for ref in wanted])
    ids = {f"{row['namespace']}/{row['name']}": row["id"] for row in rows}
    for ref in wanted:
        if ref not in ids:
            raise _missing(ref)
    await db.link(conn, [{"issue_id": issue_id, "doctrine_id": ids[ref]} for issue_id, refs in issues for ref in refs])


async def for_issue(conn: AsyncConnection, issue_id: str, repo: str | None) -> list[r.DoctrineRef]:
    return [ref_view(row) for row in await db.for_issue(conn, issue_id, repo)]


async def manage(
    core: Core, actor: Actor, action: str, ref: str | None, body: str | None, repo_prefix: str | None
) -> DoctrineList:
    """jct_manage_doctrine's one call: add, list, show or remove."""
    if action == "list":
        return await list_doctrine(core)
    if action not in ("add", "show", "remove"):
        raise invalid(f"action {action!r} is not add, list, show or remove.", "Pick one of add, list, show, remove.")
    if ref is None:
        raise invalid(f"{action} needs a name.", "Pass name as NAMESPACE/NAME, e.g. myorg/code-style.")
    if action == "show":
        return await show(core, ref)
    if action == "remove":
        return await remove(core, actor, ref)
    if body is None:
        raise invalid("add needs a body.", "Pass the guidance as body.")
    return await add(core, actor, ref, body, repo_prefix)

"""Statements for bearer tokens."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t
from server.db.records import Token


async def insert_token(conn: AsyncConnection, values: Mapping[str, Any]) -> bool:
    """False when the name is taken."""
    try:
        async with conn.begin_nested():
            await conn.execute(insert(t.tokens).values(dict(values)))
    except IntegrityError:
        return False
    return True


async def live_token_by_hash(conn: AsyncConnection, token_hash: str) -> Token | None:
    query = select(t.tokens).where(t.tokens.c.token_hash == token_hash, t.tokens.c.revoked_at.is_(None))
    return Token.maybe((await conn.execute(query)).mappings().first())


async def all_tokens(conn: AsyncConnection) -> list[Token]:
    return [Token.of(row) for row in (await conn.execute(select(t.tokens).order_by(t.tokens.c.created_at))).mappings()]


async def revoke_token(conn: AsyncConnection, name: str, when: datetime) -> bool:
    stmt = update(t.tokens).where(t.tokens.c.name == name, t.tokens.c.revoked_at.is_(None)).values(revoked_at=when)
    return (await conn.execute(stmt)).rowcount == 1


async def live_token_by_name(conn: AsyncConnection, name: str) -> Token | None:
    query = select(t.tokens).where(t.tokens.c.name == name, t.tokens.c.revoked_at.is_(None))
    return Token.maybe((await conn.execute(query)).mappings().first())


async def revoked_among(conn: AsyncConnection, token_ids: set[str]) -> set[str]:
    query = select(t.tokens.c.id).where(t.tokens.c.id.in_(sorted(token_ids)), t.tokens.c.revoked_at.is_not(None))
    return {str(token_id) for token_id in (await conn.execute(query)).scalars().all()}


async def live_token_by_id(conn: AsyncConnection, token_id: str) -> Token | None:
    query = select(t.tokens).where(t.tokens.c.id == token_id, t.tokens.c.revoked_at.is_(None))
    return Token.maybe((await conn.execute(query)).mappings().first())


async def server_secret(conn: AsyncConnection, name: str, fresh: str) -> str:
    """The secret called `name`, stored as `fresh` if there is none yet; every process reads the first one."""
    try:
        async with conn.begin_nested():
            await conn.execute(insert(t.server_secrets).values(name=name, value=fresh))
    except IntegrityError:
        pass
    value: str = (
        await conn.execute(select(t.server_secrets.c.value).where(t.server_secrets.c.name == name))
    ).scalar_one()
    return value


async def end_ui_session(conn: AsyncConnection, signature: str, expires_at: datetime, now: datetime) -> None:
    """Record a dashboard session as ended, and forget those that have expired by now anyway."""
    await conn.execute(delete(t.ended_ui_sessions).where(t.ended_ui_sessions.c.expires_at < now))
    try:
        async with conn.begin_nested():
            await conn.execute(insert(t.ended_ui_sessions).values(signature=signature, expires_at=expires_at))
    except IntegrityError:
        pass  # ended twice


async def ui_session_ended(conn: AsyncConnection, signature: str) -> bool:
    query = select(t.ended_ui_sessions.c.signature).where(t.ended_ui_sessions.c.signature == signature)
    return (await conn.execute(query)).first() is not None

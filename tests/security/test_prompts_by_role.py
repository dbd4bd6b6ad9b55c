"""prompts/list, like tools/list, shows each token only what its roles allow: a prompt is the caller's when
the tool it drives is (work_next: jct_claim_next, review: jct_submit_review, enqueue: jct_enqueue_task, plan:
jct_create_mission); prompts/get of another answers INVALID_PARAMS and renders nothing."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from server.config import Settings
from tests.security.conftest import TokenServer, mcp_error
from tests.support.serving import served

pytestmark = pytest.mark.anyio

EXPECTED = {
    "worker": {"work_next", "enqueue", "plan"},
    "reviewer": {"review"},
    "admin": {"work_next", "review", "enqueue", "plan"},
}


async def test_prompts_are_listed_and_served_per_role(
    make_settings: Callable[..., Settings],
) -> None:
    with anyio.fail_after(120):
        async with served(make_settings, auth="token") as (url, core):
            server = TokenServer("http-modern", url, core)
            for role, expected in EXPECTED.items():
                secret = await server.token(f"{role}-1", role)
                async with server.client(secret) as client:
                    listed = {p.name for p in (await client.list_prompts()).prompts}
                    assert listed == expected, role
                    for name in expected:
                        arguments = {"request": "Add a changelog"} if name == "enqueue" else None
                        arguments = {"goal": "Ship billing"} if name == "plan" else arguments
                        assert (await client.get_prompt(name, arguments)).messages
                    for name in EXPECTED["admin"] - expected:
                        with pytest.raises(MCPError) as refused:
                            await client.get_prompt(name, {"request": "x", "goal": "x"})
                        error = mcp_error(refused.value)
                        assert error.code == INVALID_PARAMS, (role, name)
                        assert "roles do not allow" in error.message
                    tools = {t.name for t in (await client.list_tools()).tools}
                    assert ("jct_claim_next" in tools) == ("work_next" in listed)

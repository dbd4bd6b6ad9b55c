"""The trace store's manifest: written when a run completes (artifacts with sha256 and sizes, the evidence
pack, the verdict) and served on the run's page, jct://runs/{id}."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import Client
from mcp_types import TextResourceContents

from server.config import Settings
from server.core.service import Core
from tests.core.helpers import bare
from tests.support.serving import served
from tests.tools.conftest import ClientFactory, ok

pytestmark = pytest.mark.anyio

TASK = {"objective": "Write docs", "operation": "docs", "target_repo": "myorg/docs"}
GUIDE = "# Guide\n\nInstall it, then run it.\n"


async def page(client: Client, uri: str) -> str:
    content = (await client.read_resource(uri)).contents[0]
    assert isinstance(content, TextResourceContents)
    return content.text


async def test_completion_writes_the_manifest_and_the_run_page_serves_it(connect: ClientFactory, core: Core) -> None:
    async with connect(core=core) as client:
        task = await ok(client, "jct_enqueue_task", **TASK)
        claim = await ok(client, "jct_claim_task", task_id=task["task_id"])
        run_id = bare(claim["run_id"])
        guide = await ok(
            client, "jct_report_artifact", task_id=task["task_id"], title="guide.md", artifact_type="doc", content=GUIDE
        )
        remote = await ok(
            client,
            "jct_report_artifact",
            task_id=task["task_id"],
            title="CI log",
            artifact_type="log",
            uri="https://ci.example.com/runs/7",
        )
        assert "None yet" in (await page(client, f"jct://runs/{run_id}")).split("## Trace manifest")[1]
        assert not (core.store.run_dir(run_id) / "manifest.json").exists()

        done = await ok(client, "jct_complete_task", task_id=task["task_id"], success=True, summary="Wrote the guide")
        pack_id, verdict = done["evidence_pack"]["id"], done["evidence_pack"]["verdict"]

        manifest = json.loads((core.store.run_dir(run_id) / "manifest.json").read_text())
        digest = hashlib.sha256(GUIDE.encode()).hexdigest()
        assert manifest["run_id"] == run_id
        assert manifest["task_id"] == task["task_id"]
        assert manifest["evidence_pack_id"] == pack_id
        assert manifest["verdict"] == verdict
        assert manifest["run_status"] == done["run_status"]
        assert manifest["total_bytes"] == len(GUIDE.encode())
        stored, linked = manifest["artifacts"]
        assert stored["id"] == guide["artifact_id"]
        assert stored["uri"] == f"jct://artifacts/{guide['artifact_id']}"
        assert stored["sha256"] == digest
        assert stored["size_bytes"] == len(GUIDE.encode())
        assert stored["file"].startswith("artifacts/guide-")
        assert (core.store.run_dir(run_id) / stored["file"]).read_text() == GUIDE
        assert linked["id"] == remote["artifact_id"]
        assert linked["uri"] == "https://ci.example.com/runs/7"
        assert linked["file"] is None

        shown = (await page(client, f"jct://runs/{run_id}")).split("## Trace manifest")[1]
        assert f"verdict {verdict}" in shown
        assert f"jct://evidence/{pack_id}" in shown
        assert f"sha256 `{digest}`" in shown
        assert f"{len(GUIDE.encode())} bytes" in shown
        assert str(core.store.root) not in shown  # no server path on a page


async def test_a_retried_completion_writes_a_lost_manifest_again(connect: ClientFactory, core: Core) -> None:
    async with connect(core=core) as client:
        task = await ok(client, "jct_enqueue_task", **TASK)
        claim = await ok(client, "jct_claim_task", task_id=task["task_id"])
        await ok(client, "jct_report_artifact", task_id=task["task_id"], title="g.md", artifact_type="doc", content="x")
        arguments = {"task_id": task["task_id"], "success": True, "summary": "Done"}
        first = await ok(client, "jct_complete_task", **arguments)
        path = core.store.run_dir(bare(claim["run_id"])) / "manifest.json"
        written = path.read_text()
        path.unlink()  # lost, say to a full disk after the completion committed
        again = await ok(client, "jct_complete_task", **arguments)
        assert again["duplicate"] is True
        assert path.read_text() == written
        assert json.loads(written)["evidence_pack_id"] == first["evidence_pack"]["id"]


async def test_a_served_completion_answers_before_its_manifest_and_the_page_waits_for_it(
    make_settings: Callable[..., Settings],
) -> None:
    """Through a server, which hands the manifest off (server/core/handoff.py; tests/core/test_handoff.py proves
    its waits and its drain at a stop): the run's page, read at once, shows it, and every completion has its file
    once the server has stopped."""
    paths: list[tuple[Path, str]] = []
    async with served(make_settings) as (base_url, core), Client(f"{base_url}/mcp", mode="legacy") as client:
        for n in range(3):
            task = await ok(client, "jct_enqueue_task", **(TASK | {"objective": f"Write docs {n}"}))
            claim = await ok(client, "jct_claim_task", task_id=task["task_id"])
            run_id = bare(claim["run_id"])
            await ok(
                client,
                "jct_report_artifact",
                task_id=task["task_id"],
                title="g.md",
                artifact_type="doc",
                content=GUIDE,
            )
            done = await ok(client, "jct_complete_task", task_id=task["task_id"], success=True, summary="Done")
            paths.append((core.store.run_dir(run_id) / "manifest.json", done["run_status"]))
            if n == 0:
                shown = (await page(client, f"jct://runs/{run_id}")).split("## Trace manifest")[1]
                assert f"jct://evidence/{done['evidence_pack']['id']}" in shown
                assert "None yet" not in shown
    # The server has stopped: the last completions' manifests, handed off just before, are on the disk.
    for path, run_status in paths:
        assert json.loads(path.read_text())["run_status"] == run_status


async def test_the_run_page_writes_a_completed_runs_missing_manifest(connect: ClientFactory, core: Core) -> None:
    """A manifest the completion never wrote (its process stopped first, with the work handed off but not done)
    is written by the run's page from the database; a run that ended without a completion gets none."""
    async with connect(core=core) as client:
        task = await ok(client, "jct_enqueue_task", **TASK)
        claim = await ok(client, "jct_claim_task", task_id=task["task_id"])
        await ok(
            client, "jct_report_artifact", task_id=task["task_id"], title="g.md", artifact_type="doc", content=GUIDE
        )
        done = await ok(client, "jct_complete_task", task_id=task["task_id"], success=True, summary="Done")
        path = core.store.run_dir(bare(claim["run_id"])) / "manifest.json"
        written = path.read_text()
        path.unlink()

        shown = (await page(client, f"jct://runs/{bare(claim['run_id'])}")).split("## Trace manifest")[1]
        assert f"jct://evidence/{done['evidence_pack']['id']}" in shown
        assert path.read_text() == written

        other = await ok(client, "jct_enqueue_task", **(TASK | {"objective": "Write more docs"}))
        released = await ok(client, "jct_claim_task", task_id=other["task_id"])
        await ok(client, "jct_release_task", task_id=other["task_id"], reason="Not mine.")
        await page(client, f"jct://runs/{bare(released['run_id'])}")
        assert not (core.store.run_dir(bare(released["run_id"])) / "manifest.json").exists()

"""Pieces the benchmarks share."""

from __future__ import annotations

import subprocess

import anyio
import httpx2

READY_SECONDS = 60.0


async def wait_ready(process: subprocess.Popen[bytes], base_url: str) -> None:
    """Poll /readyz until the server answers 200, or fail if it exits first."""
    async with httpx2.AsyncClient(timeout=5.0) as http:
        with anyio.fail_after(READY_SECONDS):
            while process.poll() is None:
                try:
                    if (await http.get(f"{base_url}/readyz")).status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.05)
    raise RuntimeError(f"the server exited with {process.returncode}")

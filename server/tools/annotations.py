"""The three kinds of tool, as MCP ToolAnnotations."""

from mcp_types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# Changes state, but nothing that cannot be undone or retried safely.
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
RETRY_SAFE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
# Cannot be undone, and a repeat is refused rather than repeated (a review decides once).
DECISIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
# Cannot be undone; a repeat changes nothing more.
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

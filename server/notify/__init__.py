"""Change notifications: the audit log, followed by every process, fanned out to MCP subscribers."""

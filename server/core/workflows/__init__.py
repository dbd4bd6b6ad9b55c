"""Workflows: definitions in YAML (definitions.py, open it first) that start.py turns into a mission."""

"""Missions: a goal split into phases of tasks that depend on each other.

Open plan.py first (storing a mission's graph); graph.py is a task's place in it (phase, blockers), status.py where a
mission stands, dag.py the dependency check shared with workflows.
"""

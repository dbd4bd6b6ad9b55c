"""What operators do and see: actions.py (open it first: requeue, priority, agents, stuck work), observe.py (a task,
a run, evidence, the audit trail), catalog.py (what clients browse) and pages.py (the jct:// pages)."""

"""Briefings: what a task asks of the agent that claims it.

Open intake.py first (the policy gate every task passes at enqueue, and the rows it is stored as); doctrine.py is
named standing guidance, versions.py how a briefing changes (a new version, with the review feedback so far),
revise.py a new version without a review round.
"""

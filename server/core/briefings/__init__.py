"""Briefings: what a task asks of the agent that claims it.

Open intake.py first (the policy gate every task passes at enqueue, and the rows it is stored as); doctrine.py is
named standing guidance, revise.py a new briefing version without a review round.
"""

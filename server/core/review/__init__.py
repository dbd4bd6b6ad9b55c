"""Review: from a completed run to a decision.

Open completion.py first: it runs the prover (prover.py: the verdict rule, and beside it the review policy's rule,
`auto_approves`), then policy.py writes the evidence pack and the run's end and applies the policy; reviews.py
takes reviews by agents or people, gates.py says who may approve and how many rounds, manifest.py records what a
run left.
"""

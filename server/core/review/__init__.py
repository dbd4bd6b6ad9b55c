"""Review: from a completed run to a decision.

Open completion.py first: it runs the prover (prover.py, the verdict rule) and the review policy; reviews.py takes
reviews by agents or people, gates.py says who may approve and how many rounds, manifest.py records what a run left.
"""

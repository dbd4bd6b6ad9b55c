"""Claims and leases: who holds a task, for how long, and what the holder may do.

Open queue.py first (the claim, the queue listing, its statistics); leases.py is the lease rule, sweeper.py expires
lapsed leases, work.py is what a holder does (report, progress, release), cancel.py ends work for good. The claim's
statement is server/db/claims/.
"""

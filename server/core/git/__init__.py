"""Git: which repositories JCT reads and what it reads from them.

Open repos.py first (which repositories, where); gitcli.py runs git, history.py is the read-only views (log, diff,
files), verified.py reads a run's change itself.
"""

"""Git: which repositories JCT reads, what it reads from them, and what it writes when it integrates.

Open repos.py first (which repositories, where); gitcli.py runs git (runner.py: one command), diffs.py reads
what changed, history.py is the read-only views (log, diff, files), verified.py reads a run's change itself;
workspaces.py makes and removes a run's branch and worktree, merges.py replays approved work onto its target
and moves it, checks.py runs the check command before it moves (DESIGN section 16).
"""

"""Integration (DESIGN section 16): from approved work to the target branch.

Open queue.py first (what an approval of an integrable task queues, and what a merge or a conflict changes);
integrator.py is the background loop that works the merge queue, one (repository, ref) per process at a time;
workspace.py gives a run its branch and worktree and tidies them. The git itself is server/core/git/merges.py,
server/core/git/checks.py and server/core/git/workspaces.py.
"""

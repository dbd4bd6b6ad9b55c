"""What py-spy's collapsed stacks (bench/protocol.py --profile) blame: each function's share of the samples,
inclusive (the function or anything it called) and self (the function itself, the stack's top).

    python bench/stacks.py /tmp/prof/sqlite/10-jct_report_artifact.txt [--top 40] [--match server/]
    python bench/stacks.py A.txt --against B.txt --calls 2000   # A's GIL time minus B's, in ms per call

`--calls` is protocol.py's --calls for that run (each phase makes that many, rounded up to a multiple of the
clients).

Frames are `function (file:line)`; the line is dropped, so a function is one row. `--match` keeps only rows
whose file contains the text (e.g. `server/` for JCT's own code).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def shares(path: Path) -> tuple[Counter[str], Counter[str], int]:
    """Inclusive and self sample counts per function, and the total samples."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_LINE.sub(")", frame) for frame in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    return inclusive, own, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--against", type=Path, help="a second profile: print the difference in share")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--calls", type=int, default=600, help="calls in each phase: protocol.py's --calls (its default, 600)"
    )
    parser.add_argument("--rate", type=int, default=200, help="py-spy's samples per second (protocol.py's)")
    parser.add_argument("--match", default="", help="only functions whose frame contains this text")
    args = parser.parse_args()
    inclusive, own, total = shares(args.profile)
    if args.against is not None:
        # Both phases made the same number of calls (bench/protocol.py), so samples compare as they are.
        base, _, base_total = shares(args.against)
        per_call = 1000 / args.rate / args.calls  # ms of GIL time per sample, per call
        delta = {f: inclusive[f] - base[f] for f in set(inclusive) | set(base)}
        print(f"{total} vs {base_total} samples: {(total - base_total) * per_call:+.3f} ms per call")
        print("ms per call, this minus --against (inclusive)")
        changed = sorted((f for f in delta if args.match in f), key=lambda f: -abs(delta[f]))[: args.top]
        for frame in changed:
            print(f"{delta[frame] * per_call:+7.3f}  {frame}")
        return
    print(f"{total} samples")
    for title, counts in (("inclusive", inclusive), ("self", own)):
        print(f"\n{title}:")
        rows = [(f, n) for f, n in counts.most_common() if args.match in f][: args.top]
        for frame, n in rows:
            print(f"{n / total * 100:6.1f}%  {frame}")


if __name__ == "__main__":
    main()

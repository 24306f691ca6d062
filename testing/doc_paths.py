#!/usr/bin/env python3
"""The docs' file references as a test: every repository path that README.md or a page under
docs/ names (`src/...`, `include/...`, `tools/...`, `testing/...`, `scripts/...`, `python/...`,
`docs/...`, `fuzz/...`, `cmake/...`) exists, so a file that moved or never landed is caught when
it goes, not by a reader.

Not checked, because they are not names of files in today's tree:
  - patterns: a path followed by `{`, `*`, `<`, `-{`, `-*`, `.{` or `.*`
    (`src/store/store_state.{h,cc}`, `results/x-*.json`);
  - history: a path after `<commit>:` or followed on its line by "at <commit>" or
    "in git history" (results and scripts kept only in git history).

Usage:
  doc_paths.py REPO_ROOT   check (exit 1 naming file:line of each missing path)
Python 3 standard library only.
"""

import os
import re
import sys

from test_counts import write_counts

TOPS = "src|include|tools|testing|scripts|python|docs|fuzz|cmake"
PATH = re.compile(r"(?<![\w/.:-])((?:" + TOPS + r")/[\w./+-]*[\w/])")
HISTORY = re.compile(r"\bat [0-9a-f]{7,40}\b|in git history")


def pages(root):
    yield os.path.join(root, "README.md")
    for d, _, files in os.walk(os.path.join(root, "docs")):
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def check(root):
    errors = []
    for page in pages(root):
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            for m in PATH.finditer(line):
                path = m.group(1).rstrip(".")
                after = line[m.end():m.end() + 2]
                if after[:1] in ("{", "*", "<") or after in ("-{", "-*", ".{", ".*"):
                    continue
                if HISTORY.search(line[m.end():]):
                    continue
                if not os.path.exists(os.path.join(root, path)):
                    errors.append(f"{os.path.relpath(page, root)}:{n}: {path} does not exist")
    return errors


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    errors = check(argv[1])
    for e in errors:
        print(e)
    print(f"doc paths: {'FAILED' if errors else 'ok'}")
    write_counts("doc_paths", not errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

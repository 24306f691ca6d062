"""One test case for scripts/test.sh's closing line, written by the Python checks CTest runs
(format and file naming: testing/gtest_main.cc)."""

import os


def write_counts(default_name, ok):
    """Writes "<passed> <failed> <skipped>" for one case into $RANGEKV_TEST_COUNTS_DIR, if set."""
    directory = os.environ.get("RANGEKV_TEST_COUNTS_DIR")
    if not directory:
        return
    tag = os.environ.get("RANGEKV_TEST_COUNTS_TAG", "run")
    name = os.environ.get("RANGEKV_TEST_NAME", default_name)
    with open(os.path.join(directory, f"{tag}-{name}.txt"), "w", encoding="utf-8") as f:
        f.write("1 0 0\n" if ok else "0 1 0\n")

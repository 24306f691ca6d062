"""The ``rangekv`` command of an installed package, and ``python -m rangekv``.

The CLI is a C++ program that the wheel ships inside the package (``rangekv/_bin/rangekv``,
python/CMakeLists.txt). pip puts a small script named ``rangekv`` on the environment's PATH
(pyproject.toml ``[project.scripts]``) that replaces itself with that program: signals, exit
status and standard streams are the program's own, as if it had been run directly, so
``rangekv serve`` behaves the same under a service manager.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def bundled_cli() -> Path:
    """The CLI program this package ships."""
    return Path(__file__).parent / "_bin" / "rangekv"


def main(argv: list[str] | None = None) -> None:
    """Runs the bundled CLI with ``argv`` (default: this process's arguments); does not return.
    ``RANGEKV_CLI`` names another program to run instead."""
    args = sys.argv[1:] if argv is None else list(argv)
    # Never looked up on PATH: the first `rangekv` there is this script.
    program = os.environ.get("RANGEKV_CLI") or str(bundled_cli())
    if not os.access(program, os.X_OK):
        sys.exit(f"rangekv: the CLI program {program} is missing or not executable "
                 "(reinstall the rangekv package, or set RANGEKV_CLI)")
    os.execv(program, ["rangekv", *args])

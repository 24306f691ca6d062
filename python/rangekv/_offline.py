"""rangekv.inspect / rangekv.fsck: offline views of a store directory.

They run the ``rangekv`` CLI's JSON mode (``rangekv inspect --dir D --json``; docs/inspect-fsck.md
describes every field). The wheel ships the CLI inside the package (``rangekv/_bin/rangekv``);
``RANGEKV_CLI`` overrides the path, else ``rangekv`` on PATH is used. Run them on a store that
no engine has open.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ._errors import NotFound, NotSupported, from_status


def cli_path() -> str:
    """The rangekv CLI used by inspect() and fsck()."""
    env = os.environ.get("RANGEKV_CLI")
    if env:
        return env
    bundled = Path(__file__).parent / "_bin" / "rangekv"
    if bundled.is_file():
        return str(bundled)
    found = shutil.which("rangekv")
    if found:
        return found
    raise NotSupported("the rangekv CLI was not found (set RANGEKV_CLI or reinstall the package)")


def _run(args: list[str], store_dir: str | os.PathLike) -> tuple[int, Any, str]:
    d = os.fspath(store_dir)
    if not os.path.isdir(d):
        raise NotFound(f"{d} is not a directory")
    p = subprocess.run([cli_path(), *args, "--dir", d, "--json"], capture_output=True, text=True,
                       check=False)
    try:
        out = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        out = None
    return p.returncode, out, p.stderr.strip()


def inspect(store_dir: str | os.PathLike) -> dict:
    """What the store directory holds: pack file, identity record, state (index loaded or
    discarded and why), capacity and records per namespace; for a directory of stores (a
    connector's store_dir, a store service's root) ``{"store_dir": ..., "stores": [...]}`` with
    one such dict per store. Raises NotFound / Corruption / ... when a pack file cannot be
    opened."""
    rc, out, err = _run(["inspect"], store_dir)
    if rc != 0 or not isinstance(out, dict):
        if "not_found" in err or "no pack file" in err:
            raise NotFound(err or f"no store in {os.fspath(store_dir)}")
        raise from_status("corruption" if "corruption" in err else "io_error",
                          err or "rangekv inspect failed")
    return out


def fsck(store_dir: str | os.PathLike, *, payload: bool = True) -> dict:
    """Verifies the store offline (structure, and every stored byte against its digest unless
    payload=False). Returns the report with ``"ok": bool`` and ``"problems"``."""
    rc, out, err = _run(["fsck"] + ([] if payload else ["--no-payload"]), store_dir)
    if not isinstance(out, dict):
        if "not_found" in err or "no pack file" in err:
            raise NotFound(err or f"no store in {os.fspath(store_dir)}")
        raise from_status("io_error", err or f"rangekv fsck failed (exit {rc})")
    return out

"""Which CPUs the worker's RangeKV engine threads run on (the ``cpus`` key).

vLLM's CPU worker binds its compute: at its first parallel region the worker's main thread is
pinned to the first of the OpenMP CPUs vLLM chose for the rank (``OMP_PLACES`` /
``OMP_PROC_BIND``), and vLLM keeps ``VLLM_CPU_NUM_OF_RESERVED_CPU`` CPUs out of every rank's
list for the other processes. A thread inherits its creator's affinity, so an engine opened in
``register_kv_caches`` would run every read worker, scatter and digest thread on that one
compute CPU, beside the forward pass, and leave the reserved CPUs idle (measured on a 2-vCPU
machine: all of the worker's threads on CPU 0, CPU 1 unused). The connector therefore opens
the engine (and its lookup server) with the calling thread's affinity set to the CPUs chosen
here; the engine's threads are all created during open and keep it, and the calling thread's
own affinity is put back afterwards.

Settings:

- ``"auto"`` (default): vLLM's reserved CPUs on a CPU worker whose compute vLLM has bound; the
  allowed CPUs no rank computes on when vLLM reserved none; the inherited affinity otherwise
  (GPU workers, ``VLLM_CPU_OMP_THREADS_BIND=nobind``, no CPU left over).
- ``"inherit"``: no change (the affinity of the thread that opens the engine).
- a CPU list such as ``"1"`` or ``"2,4-7"``.

Pure functions here; only :func:`vllm_binding` imports vLLM.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
from collections.abc import Iterable, Iterator

_LIST = re.compile(r"\s*\d+(\s*-\s*\d+)?\s*(,\s*\d+(\s*-\s*\d+)?\s*)*")


def parse_cpu_list(text: str) -> frozenset[int]:
    """``"2,4-7"`` -> {2, 4, 5, 6, 7}; ValueError on anything else (empty, reversed ranges)."""
    if not isinstance(text, str) or not _LIST.fullmatch(text):
        raise ValueError(f"expected 'auto', 'inherit' or a CPU list such as '1' or '2,4-7', "
                         f"got {text!r}")
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"CPU range {part.strip()!r} runs backwards")
        cpus.update(range(a, b + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """{0, 2, 3, 4} -> "0,2-4" (the form `taskset -c` and /proc print)."""
    out = []
    # Consecutive CPUs share (cpu - position): each group is one run.
    for _, group in itertools.groupby(enumerate(sorted(set(cpus))), lambda p: p[1] - p[0]):
        run = [c for _, c in group]
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def resolve(setting: str, *, allowed: frozenset[int], compute: frozenset[int],
            reserved: frozenset[int]) -> tuple[frozenset[int] | None, str]:
    """The engine's CPUs for `setting` (None: inherit) and a reason for the log.

    `allowed`: the CPUs the serving processes may use (the parent process's affinity);
    `compute`: the CPUs vLLM bound the ranks' compute to (empty: it bound nothing);
    `reserved`: the CPUs vLLM kept out of every rank's list."""
    if setting == "inherit":
        return None, "inherited (cpus='inherit')"
    if setting != "auto":
        return parse_cpu_list(setting), "configured"
    if not compute:
        return None, "inherited (vLLM bound no compute CPUs)"
    free = reserved or (allowed - compute)
    if allowed:
        free &= allowed
    if not free:
        return None, "inherited (vLLM left no CPU outside its compute binding)"
    return frozenset(free), ("vLLM's reserved CPUs" if reserved else
                             "the allowed CPUs outside vLLM's compute binding")


def vllm_binding(vllm_config) -> tuple[frozenset[int], frozenset[int], frozenset[int]]:
    """(allowed, compute, reserved) as vLLM's CPU platform chose them; all empty where vLLM
    binds nothing (a GPU platform) or its binding class is not there (another vLLM version).

    vLLM computes its lists in the EngineCore process from that process's affinity (the worker's
    own is already narrowed to its compute CPUs), so they are recomputed here with the calling
    thread moved, for the call, to the parent's affinity: the EngineCore spawns the workers."""
    try:
        allowed = frozenset(os.sched_getaffinity(os.getppid()))
    except OSError:
        return frozenset(), frozenset(), frozenset()
    try:
        from vllm.platforms import current_platform
        if not current_platform.is_cpu():
            return allowed, frozenset(), frozenset()
        from vllm.utils import ompmultiprocessing
        # Asked again here only to read its lists: its log lines were printed at start-up.
        quiet = logging.getLogger(ompmultiprocessing.__name__)
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            with threads_on(allowed):
                manager = ompmultiprocessing.OMPProcessManager(vllm_config)
        finally:
            quiet.setLevel(level)
        compute = frozenset(c for cpus in manager.cpu_lists for c in cpus)
        reserved = frozenset(manager.reserved_cpu_list)
    except Exception:  # noqa: BLE001 - an internal vLLM class: any change means "don't know"
        return allowed, frozenset(), frozenset()
    return allowed, compute, reserved


@contextlib.contextmanager
def threads_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Threads created inside the block run on `cpus` (None: unchanged); the calling thread's
    own affinity is restored on exit. A list the kernel refuses (no CPU of it allowed here)
    raises ValueError naming it."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        raise ValueError(f"RangeKVConnector: cpus {format_cpu_list(cpus)!r}: the kernel refused "
                         f"this CPU list for this process (none of it is online or in its "
                         f"cpuset): {e}") from None
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)

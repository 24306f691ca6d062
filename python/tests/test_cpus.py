"""Where the vLLM connector puts the engine's threads (rangekv/vllm/cpus.py), without vLLM."""

from __future__ import annotations

import os
import threading

import pytest

import rangekv
from rangekv.vllm.config import ConfigError, parse_config
from rangekv.vllm.cpus import format_cpu_list, parse_cpu_list, resolve, threads_on

from conftest import engine_kwargs


def test_cpu_lists_parse_and_print_as_taskset_does():
    assert parse_cpu_list("1") == {1}
    assert parse_cpu_list("2,4-7") == {2, 4, 5, 6, 7}
    assert parse_cpu_list(" 0 - 2 , 9 ") == {0, 1, 2, 9}
    assert format_cpu_list({0, 2, 3, 4, 9}) == "0,2-4,9"
    assert format_cpu_list(parse_cpu_list("5-8,1")) == "1,5-8"
    for bad in ("", "x", "1,", "3-1", "-1", "1;2", "auto-ish"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


@pytest.mark.parametrize("value", ["", "half", "1,,2", 1])
def test_a_bad_cpus_key_names_itself(value):
    with pytest.raises(ConfigError, match="cpus: expected 'auto', 'inherit' or a CPU list"):
        parse_config({"store_dir": "/x", "cpus": value})


def test_cpus_key_defaults_to_auto_and_takes_a_list():
    assert parse_config({"store_dir": "/x"}).cpus == "auto"
    assert parse_config({"store_dir": "/x", "cpus": "1,3"}).cpus == "1,3"


ALL = frozenset(range(8))


@pytest.mark.parametrize("setting, compute, reserved, want, why", [
    # vLLM's own choice on a 2-CPU machine: compute on 0, CPU 1 reserved.
    ("auto", {0}, {1}, {1}, "reserved"),
    # A user binding with nothing reserved: what no rank computes on.
    ("auto", {0, 1, 2, 3}, set(), {4, 5, 6, 7}, "outside"),
    # vLLM bound nothing (GPU worker, nobind): leave the threads where they are.
    ("auto", set(), set(), None, "bound no compute"),
    # Every CPU computes: nothing better to pick.
    ("auto", ALL, set(), None, "no CPU outside"),
    ("inherit", {0}, {1}, None, "inherit"),
    ("2,4", {0}, {1}, {2, 4}, "configured"),
])
def test_resolve(setting, compute, reserved, want, why):
    got, reason = resolve(setting, allowed=ALL, compute=frozenset(compute),
                          reserved=frozenset(reserved))
    assert got == (None if want is None else frozenset(want))
    assert why in reason


def _thread_masks() -> dict[int, frozenset[int]]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = frozenset(os.sched_getaffinity(int(tid)))
        except OSError:  # the thread ended meanwhile
            pass
    return out


def test_threads_started_inside_run_on_the_cpus_and_the_caller_gets_its_own_back():
    mine = frozenset(os.sched_getaffinity(0))
    target = frozenset({max(mine)})
    seen = []
    with threads_on(target):
        t = threading.Thread(target=lambda: seen.append(frozenset(os.sched_getaffinity(0))))
        t.start()
        t.join()
    assert seen == [target]
    assert frozenset(os.sched_getaffinity(0)) == mine
    with threads_on(None):
        assert frozenset(os.sched_getaffinity(0)) == mine


def test_a_list_the_kernel_refuses_is_a_clear_error_and_changes_nothing():
    mine = frozenset(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match="cpus '100000': the kernel refused"):
        with threads_on(frozenset({100000})):
            pass
    assert frozenset(os.sched_getaffinity(0)) == mine


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_every_engine_thread_runs_where_it_was_opened(store_dir):
    """The connector relies on the engine creating all its threads during open: an engine opened
    inside threads_on({c}) has no thread outside c, and the caller keeps its own CPUs."""
    mine = frozenset(os.sched_getaffinity(0))
    target = frozenset({max(mine)})
    before = set(_thread_masks())
    with threads_on(target):
        engine = rangekv.Engine(store_dir, **engine_kwargs())
    try:
        new = {tid: m for tid, m in _thread_masks().items() if tid not in before}
        assert len(new) >= 4, new  # read workers, reaper, store workers, host device pool
        assert set(new.values()) == {target}, {t: format_cpu_list(m) for t, m in new.items()}
        assert frozenset(os.sched_getaffinity(0)) == mine
    finally:
        engine.close()

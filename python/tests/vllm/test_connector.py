"""RangeKVConnector inside a real vLLM 0.32 engine (CPU backend), greedy decoding, compared
token by token and logprob by logprob with a run without the connector (vLLM's own prefix
cache in that run gives the same cached/computed split, so the arithmetic is the same)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import BLOCK, kv_config, rand_tokens, run_engine

SHARED = rand_tokens(1, 2080)                  # 65 blocks
P1 = SHARED + rand_tokens(2, 50)               # stores 66 blocks (2112 tokens)
P2 = SHARED + rand_tokens(3, 70)               # diverges inside P1's pack: hit 2080
P3 = SHARED[:1000] + rand_tokens(4, 300)       # partial: hit 992 (31 whole blocks)
P4 = P1[:2112]                                 # block-aligned, all stored: hit 2080, not 2112
P5 = rand_tokens(5, 400)
P6 = SHARED[:512] + rand_tokens(6, 200)
P7 = rand_tokens(7, 700)


def req(p, **kw):
    return {"prompt": p, "max_tokens": 8, **kw}


# P2 again after its own store: its 67 whole blocks (2144 tokens) are in both caches.
ROUNDS = [[req(P1)], [req(P2)], [req(P3)], [req(P4)], [req(P2), req(P5), req(P6), req(P7)],
          [req(P2)]]
CACHED = [[0], [2080], [992], [2080], [2144, 0, 512, 0], [2144]]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vllm")


@pytest.fixture(scope="module")
def base(work, model_dir):
    return run_engine(work, "base", model_dir, ROUNDS)


@pytest.fixture(scope="module")
def plain(work, model_dir):
    return run_engine(work, "plain", model_dir, ROUNDS, kv_config(work / "store"))


def same(a, b):
    assert a["tokens"] == b["tokens"]
    assert a["logprobs"] == b["logprobs"]


def test_store_then_restore_matches_no_connector(base, plain):
    assert [[o["num_cached_tokens"] for o in r] for r in base.rounds] == CACHED
    assert [[o["num_cached_tokens"] for o in r] for r in plain.rounds] == CACHED
    for rb, rp in zip(base.rounds, plain.rounds):
        for ob, op in zip(rb, rp):
            same(ob, op)
    st = plain.stats
    assert st["restored_tokens"] == sum(map(sum, CACHED)), st
    assert st["stored_tokens"] > 0 and st["load_failures"] == 0, st


def test_restart_survives_and_negative_control(work, model_dir, base, plain):
    r = run_engine(work, "restart", model_dir, [[req(P2)], [req(P2, corrupt=True)]],
                   kv_config(work / "store"))
    assert r.rounds[0][0]["num_cached_tokens"] == 2144
    same(r.rounds[0][0], base.rounds[-1][0])
    # Negative control: scrambled restored bytes must change what the model says.
    bad = r.rounds[1][0]
    assert bad["num_cached_tokens"] == 2144
    assert (bad["tokens"], bad["logprobs"]) != (base.rounds[-1][0]["tokens"],
                                                base.rounds[-1][0]["logprobs"])
    assert r.stats["restored_tokens"] == 2 * 2144


def test_layerwise(work, model_dir, base):
    r = run_engine(work, "layerwise", model_dir, ROUNDS[:2],
                   kv_config(work / "store-lw", layerwise=True))
    assert [[o["num_cached_tokens"] for o in x] for x in r.rounds] == CACHED[:2]
    for rb, rp in zip(base.rounds, r.rounds):
        same(rb[0], rp[0])


def _flip_payload_byte(store: Path) -> None:
    """Flips one payload byte of the pack holding the first stored tokens."""
    import rangekv

    info = rangekv.inspect(str(store))
    pf = info["pack_file"]
    slot = min(r["slot"] for ns in info["namespaces"] for r in ns["records"]
               if r["path_token_begin"] == 0)
    off = pf["data_offset"] + slot * pf["geometry"]["pack_bytes"] + 1000
    with open(pf["path"], "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x40]))


def test_flipped_byte_with_checksum_is_recomputed(work, model_dir, base, plain):
    store = work / "store-flip"
    shutil.copytree(work / "store", store)
    _flip_payload_byte(store / "rank-0")
    r = run_engine(work, "flip", model_dir, [[req(P2)]], kv_config(store, checksum="always"))
    # vLLM recomputes from the first failed block, a different split of the same arithmetic
    # than the reference run: the tokens are equal, the logprobs equal up to rounding.
    got, ref = r.rounds[0][0], base.rounds[-1][0]
    assert got["tokens"] == ref["tokens"]
    for a, b in zip(got["logprobs"], ref["logprobs"]):
        assert [t for t, _ in a] == [t for t, _ in b]
        assert max(abs(x - y) for (_, x), (_, y) in zip(a, b)) < 0.05
    assert r.stats["load_failures"] >= 1 and r.stats["failed_tokens"] > 0, r.stats
    assert r.stats["checksum_failures"] >= 1, r.stats
    assert "blocks [" in r.log and "recomputed" in r.log


def test_bad_config_fails_at_start(work, model_dir):
    r = run_engine(work, "badcfg", model_dir, [[req(P5)]],
                   kv_config(work / "store-bad", bogus_key=1), expect_fail=True)
    assert r.rc != 0
    assert "unknown kv_connector_extra_config key(s) ['bogus_key']" in r.log


def test_preemption_with_small_kv_cache(work, model_dir, base):
    """Four requests in 72 blocks of KV cache: vLLM preempts, the resumed requests look
    up again and restore what was stored; every request completes with the tokens vLLM
    computes without the connector."""
    batch = [req(SHARED[:512] + rand_tokens(10 + i, 300), max_tokens=48) for i in range(4)]
    rounds = [[req(SHARED[:700])], batch]
    kw = {"num_gpu_blocks_override": 72, "max_num_seqs": 4, "max_model_len": 1024}
    b = run_engine(work, "preempt-base", model_dir, rounds, llm_kwargs=kw)
    r = run_engine(work, "preempt", model_dir, rounds, kv_config(work / "store-pre"),
                   llm_kwargs=kw)
    assert r.stats["preempted_requests"] >= 1, r.stats
    for ob, op in zip(b.rounds[1], r.rounds[1]):
        assert len(op["tokens"]) == 48
        assert op["tokens"] == ob["tokens"]

"""The cluster tier through the Python API: two engines ("nodes") with separate stores share one
SeaweedFS bucket and one redis-server (remote_servers.py starts both on 127.0.0.1); what one
stores, the other restores bit for bit."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

import rangekv

from conftest import B, L, engine_kwargs, random_layers, restore, store_all, token_rows, zero_layers
from remote_servers import start_servers, stop_servers


@pytest.fixture(scope="module")
def servers():
    d, values = start_servers()
    yield values
    stop_servers(d)


def _engine(path, servers, prefix, **kw):
    return rangekv.Engine(str(path), **engine_kwargs(
        remote=f"s3://{servers['RANGEKV_TEST_S3_BUCKET']}/{prefix}",
        remote_endpoint=servers["RANGEKV_TEST_S3_ENDPOINT"],
        directory=servers["RANGEKV_TEST_REDIS"], remote_lookup_timeout_ms=5000, **kw))


def test_node_b_restores_node_a_bit_exact(tmp_path, servers):
    prefix = f"py-{uuid.uuid4().hex[:8]}"
    n = 200
    tokens = (np.arange(1, n + 1, dtype=np.int32) * 7) % 1000
    layers = random_layers("flash_attn_nhd", 64, seed=3)
    slots = np.random.default_rng(1).permutation(64 * B)[:n].astype(np.int64)
    a = _engine(tmp_path / "a", servers, prefix)
    store_all(a, tokens, layers, slots)
    deadline = time.time() + 60
    while a.remote_stats()["packs_published"] < 7 and time.time() < deadline:
        time.sleep(0.05)
    # T = 32 tokens per pack: ceil(199 / 32) packs (a store keeps the last token out).
    assert a.remote_stats()["packs_published"] == 7
    b = _engine(tmp_path / "b", servers, prefix, remote_publish=False)
    dst = zero_layers("flash_attn_nhd", 64)
    dst_slots = np.random.default_rng(2).permutation(64 * B)[:n].astype(np.int64)
    hit, out, used = restore(b, tokens, dst, lambda k: dst_slots[:k])
    assert hit == 192
    assert out.ok, out
    for layer in range(L):
        assert np.array_equal(token_rows("flash_attn_nhd", dst[layer], used),
                              token_rows("flash_attn_nhd", layers[layer], slots[:hit]))
    st = b.remote_stats()
    assert st["enabled"] and st["gets"] == 6 * L and st["verified_spans"] == 6 * L
    assert st["directory_round_trips"] == 2  # one grid walk, one lease script
    a.close()
    b.close()

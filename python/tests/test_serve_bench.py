"""`rangekv bench serve` without a vLLM server: its statistics, tables, plots, request builders,
concurrent client (against a fake streaming server) and the connector's break-even threshold
math."""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rangekv.bench import plots
from rangekv.bench import serve_stats as st
from rangekv.bench.serve_client import run_phases
from rangekv.vllm import break_even
from rangekv.vllm.config import ConfigError, parse_config


def bench_args(*argv):
    from rangekv.bench import serve

    p = argparse.ArgumentParser()
    serve.add_parser(p.add_subparsers())
    return p.parse_args(["serve", *argv])


# ---- statistics -----------------------------------------------------------------------------

def test_percentiles_interpolate_like_numpy_and_drop_missing_samples():
    xs = [0.5, 0.1, None, 0.3, 0.2, 0.4]
    assert st.percentile(xs, 50) == pytest.approx(0.3)
    assert st.percentile(xs, 90) == pytest.approx(0.46)   # numpy.percentile(..., 90)
    assert st.percentile(xs, 0) == 0.1 and st.percentile(xs, 100) == 0.5
    assert st.percentile([], 50) is None
    s = st.latency_summary(xs)
    assert s["n"] == 5 and s["failed"] == 1 and s["p99"] == pytest.approx(0.496)
    with pytest.raises(ValueError):
        st.percentile(xs, 101)


PROM = """# HELP vllm:prefix_cache_hits Prefix cache hits
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="bench"} 300.0
vllm:prefix_cache_hits_created{engine="0",model_name="bench"} 1.7e9
vllm:prefix_cache_queries_total{engine="0",model_name="bench"} 1000.0
vllm:external_prefix_cache_queries_total{engine="0"} 700.0
vllm:external_prefix_cache_hits_total{engine="0"} 600.0
vllm:rangekv_bytes_read_total{engine="0"} 1048576.0
vllm:rangekv_bytes_read_total{engine="1"} 1048576.0
vllm:weird NaN
"""


def test_prometheus_text_sums_label_sets_and_skips_comments_and_nan():
    m = st.parse_prometheus(PROM)
    assert m["vllm:prefix_cache_hits_total"] == 300.0
    assert m["vllm:rangekv_bytes_read_total"] == 2 * 1048576.0
    assert "vllm:weird" not in m and not any(k.startswith("#") for k in m)
    d = st.metrics_delta({"vllm:prefix_cache_hits_total": 100.0}, m)
    assert d["vllm:prefix_cache_hits_total"] == 200.0
    assert d["vllm:rangekv_restored_tokens_total"] == 0.0  # absent from both: 0
    assert st.metrics_delta(None, m) == {}


def test_workload_summary_throughput_and_hit_rates():
    results = [{"ttft_s": 0.1, "token_ids": [1, 2], "prompt_tokens": 100, "cached_tokens": 96},
               {"ttft_s": 0.3, "token_ids": [3, 4], "prompt_tokens": 100, "cached_tokens": 0},
               {"ttft_s": None, "token_ids": [], "prompt_tokens": 100, "cached_tokens": None,
                "error": "HTTP 500"}]
    s = st.workload_summary(results, 2.0, st.parse_prometheus(PROM))
    assert s["requests"] == 3 and s["errors"] == 1
    assert s["requests_per_s"] == 1.5 and s["output_tokens_per_s"] == 2.0
    assert s["hit_rate"] == pytest.approx(96 / 300)
    assert s["vllm_hit_rate"] == pytest.approx(0.3)
    assert s["external_hit_rate"] == pytest.approx(6 / 7)
    assert s["ttft"]["p50"] == pytest.approx(0.2) and s["ttft"]["failed"] == 1
    # Without usage details (server without --enable-prompt-tokens-details): no hit rate.
    s = st.workload_summary([{"ttft_s": 0.1, "token_ids": [1], "prompt_tokens": 5}], 1.0)
    assert s["hit_rate"] is None and s["vllm_hit_rate"] is None


def test_crossing_interpolates_and_reports_start_and_never():
    xs = [100, 200, 400]
    assert st.crossing(xs, [1.0, 2.0, 4.0], [1.5, 2.0, 3.0]) == 200
    assert st.crossing(xs, [1.0, 2.0, 4.0], [1.5, 2.5, 3.0]) == pytest.approx(200 + 200 * 0.5 / 1.5)
    assert st.crossing(xs, [1.0, 2.0, 4.0], [0.5, 1.0, 2.0]) == 100       # below from the start
    assert st.crossing(xs, [1.0, 2.0, 4.0], [2.0, 3.0, 5.0]) is None      # never
    assert st.crossing(xs, [1.0, None, 4.0], [1.5, 0.0, 3.0]) == pytest.approx(
        100 + 300 * 0.5 / 1.5)


def test_bank_bytes_match_the_documented_defaults():
    # The serve bench runs vLLM's CPU backend: the host device's auto layer group of 2.
    assert st.bank_bytes({}, layers=32) == 8 * (32 << 20) + 8 * 2 * 2 * (32 << 20)  # 1.25 GiB
    assert st.bank_bytes({}, layers=32, device="cuda") == 8 * (32 << 20) + 8 * 2 * 4 * (32 << 20)
    assert st.bank_bytes({"layer_group": 4}, layers=32) == 8 * (32 << 20) + 8 * 2 * 4 * (32 << 20)
    # Shallow model: the layer group is capped at the layer count; sizes as strings.
    assert st.bank_bytes({"stripe_bytes": "4MiB"}, layers=1) == (
        8 * (4 << 20) + 8 * 2 * 1 * (4 << 20))
    assert st.bank_bytes({"layer_group": 4, "stripe_bytes": "4MiB"}, layers=2) == (
        8 * (4 << 20) + 8 * 2 * 2 * (4 << 20))
    assert st.bank_bytes({"read_bank_bytes": 1 << 20, "store_bank_bytes": "2MiB",
                          "read_banks": 2, "store_banks": 1}, layers=4) == 2 * (1 << 20) + (2 << 20)


def test_process_tree_memory_counts_this_process_group():
    m = st.process_tree_memory(os.getpgid(0))
    assert m["processes"] >= 1 and m["rss_bytes"] > 0 and m["hwm_bytes"] >= m["rss_bytes"] // 2
    assert st.process_tree_memory(2 ** 22 + 12345)["processes"] == 0  # no such group


# ---- tables ---------------------------------------------------------------------------------

def single_results():
    arms = [{"name": "recompute", "kind": "recompute", "ttft_s": [1.0, 1.2], "median_s": 1.1,
             "error": None},
            {"name": "resident", "kind": "resident", "ttft_s": [0.40, 0.42], "median_s": 0.41,
             "error": None}]
    for g, med in ((256, 0.45), (32, 0.47)):
        arms.append({"name": f"rangekv {8192 // g}", "kind": "rangekv", "granularity": g,
                     "layerwise": False, "ttft_s": [med, med], "median_s": med, "error": None,
                     "tokens_match": [True, True], "median_minus_resident_ms": (med - 0.41) * 1e3,
                     **({"exact_resident": [True, True]} if g == 256 else {})})
    arms.append({"name": "rangekv LW", "kind": "rangekv", "granularity": 256, "layerwise": True,
                 "ttft_s": [0.44, 0.46], "median_s": 0.45, "error": None,
                 "tokens_match": [True, False], "exact_resident": [True, False],
                 "median_minus_resident_ms": 40.0})
    # The tmpfs arm, with resident runs paired in its own server.
    arms.append({"name": "rangekv 32 shm", "kind": "rangekv", "granularity": 256,
                 "layerwise": False, "medium": "shm", "ttft_s": [0.43, 0.43], "median_s": 0.43,
                 "error": None,
                 "paired_resident_s": [0.39, 0.40], "tokens_match": [True, True],
                 "median_minus_resident_ms": 20.0, "minus_resident_over_ceiling_read": 0.25,
                 "speedup_kept": 0.953})
    return {"config": {"layers": 4, "kv_heads": 8, "head_size": 128, "prefix": 8192},
            "arms": arms,
            "prefix_read_ceiling": {"shm": {"seconds": 0.08, "threads": 4, "block_bytes": 8 << 20}}}


def test_table3_has_the_papers_rows_one_column_per_object_count():
    t = st.table3(single_results()).splitlines()
    # Coarse first, then layerwise, then the tmpfs point.
    assert t[0] == "| Objects | 32 | 256 | 128 LW | 32 shm |"
    # G x 4 KiB x 4 layers; LW: G x 4 KiB
    assert t[2] == "| Object size | 4 MiB | 512 KiB | 1 MiB | 4 MiB |"
    assert t[3] == "| Recompute | 1.100 | 1.100 | 1.100 | 1.100 |"
    # Paired resident runs where an arm has them, else the unpaired resident arm.
    assert t[4] == "| Resident (paired, same server) | 0.410 | 0.410 | 0.410 | 0.395 |"
    assert t[5] == "| RangeKV | 0.450 | 0.470 | 0.450 | 0.430 |"
    assert t[6] == "| RangeKV - resident (ms) | 40 | 60 | 40 | 20 |"
    assert t[7] == "| (RangeKV - resident) / prefix read at best ceiling | - | - | - | 0.25 |"
    assert t[8] == "| Speedup kept (resident / RangeKV) | - | - | - | 0.95 |"
    assert t[9] == "| Tokens = recompute | 2/2 | 2/2 | 1/2 | 2/2 |"
    assert t[10] == "| Tokens and logprobs = resident, bitwise | 2/2 | - | 1/2 | - |"
    assert "shm: 80.0 ms (4 threads x 8 MiB)" in t[12]
    assert st.table3({"arms": [], "config": {}}) == ""


def docqa_result():
    def phase(c, ttfts, cached):
        res = [{"id": f"c{c}-{i}", "ttft_s": t, "token_ids": [1, 2], "prompt_tokens": 100,
                "cached_tokens": k} for i, (t, k) in enumerate(zip(ttfts, cached))]
        return {"concurrency": c, "summary": st.workload_summary(res, 1.0), "samples": res,
                "tokens_match": [True] * len(res)}
    return {"docs": 3, "doc_tokens": 96, "questions": 2, "question_tokens": 8, "answer_tokens": 2,
            "kv_cache_tokens": 160, "cache_docs": 1.5,
            "arms": [{"name": "recompute", "kind": "recompute", "error": None,
                      "phases": [dict(phase(1, [0.3, 0.4], [0, 0]), tokens_match=None)]},
                     {"name": "rangekv + prefix cache", "kind": "rangekv", "error": None,
                      "phases": [phase(1, [0.1, 0.2], [96, 96]), phase(4, [0.2, 0.3], [96, 64])]},
                     {"name": "broken", "kind": "prefix", "error": "server exited with 1: boom"}]}


def test_docqa_table_rows_per_arm_and_concurrency():
    t = st.docqa_table(docqa_result()).splitlines()
    assert t[2].startswith("| recompute | 1 | 0.350 |") and "| ref |" in t[2]
    assert t[3].startswith("| rangekv + prefix cache | 1 | 0.150 |") and "| 0.96 |" in t[3]
    assert "| 2/2 |" in t[3]
    assert t[4].startswith("| rangekv + prefix cache | 4 |") and "| 0.80 |" in t[4]
    assert "boom" in t[5]


def test_breakeven_and_resources_tables():
    be = {"prefix_lengths": [128, 256],
          "arms": [{"name": "recompute", "median_s": [0.10, 0.20]},
                   {"name": "rangekv disk", "median_s": [0.12, 0.15]}],
          "crossings": {"rangekv disk": 170.0},
          "gate": {"medium": "disk", "threshold_tokens": 192, "extra_config": {"x": 1},
                   "decisions": ["recompute", "restore"], "decisions_ok": True,
                   "chosen_minus_other_ms": [-20.0, -50.0], "excess_ms": [1.0, -2.0],
                   "worse": []}}
    t = st.breakeven_table(be)
    assert "| 128 | 0.100 | 0.120 |" in t and "at or below recompute from 170 tokens on" in t
    assert "threshold 192 tokens" in t and "-20, -50" in t and "+1, -2" in t
    assert "made TTFT worse: none" in t
    be["crossings"] = {"rangekv disk": 128}
    assert "from the shortest length measured (128 tokens) on" in st.breakeven_table(be)
    r = st.resources_table([{"workload": "docqa", "name": "rangekv",
                             "memory": {"rss_bytes": 3 << 30, "hwm_bytes": 4 << 30,
                                        "locked_bytes": 0, "pinned_bytes": 0},
                             "bank_bytes": 288 << 20, "kv_cache_bytes": 512 << 20,
                             "payload": {"vllm:rangekv_bytes_read_total": 64 << 20,
                                         "vllm:rangekv_bytes_written_total": 32 << 20}}])
    assert "| docqa: rangekv | 3.00 GiB | 4.00 GiB |" in r
    assert "| 288 MiB | 512 MiB | 64 MiB | 32 MiB |" in r


# ---- the break-even threshold --------------------------------------------------------------------

def test_break_even_tokens_is_where_the_model_lines_cross_rounded_up_to_blocks():
    # recompute 200 us/token; restore 16 KiB/token at 2 GiB/s (7.6 us) + 2 ms: h* = 10.4 tokens
    bpt = break_even.bytes_per_token(layers=4, kv_heads=8, head_size=128, dtype_bytes=2)
    assert bpt == 16384  # 4 KiB per token per layer (8 KV heads x 128, bf16), 4 layers
    h = break_even.break_even_tokens(prefill_tokens_per_s=5000, restore_bytes_per_s=2 << 30,
                                     bytes_per_token=bpt, overhead_s=0.002, block_size=32,
                                     never=10**6)
    assert h == 32
    h = break_even.break_even_tokens(prefill_tokens_per_s=5000, restore_bytes_per_s=2 << 30,
                                     bytes_per_token=bpt, overhead_s=0.1, block_size=32,
                                     never=10**6)
    exact = 0.1 / (1 / 5000 - bpt / (2 << 30))
    assert h % 32 == 0 and h - 32 < exact <= h
    assert break_even.break_even_tokens(prefill_tokens_per_s=5000, restore_bytes_per_s=2 << 30,
                                        bytes_per_token=bpt, overhead_s=0.0, block_size=32,
                                        never=10**6) == 0
    # Reading a token costs more than computing it: never restore.
    assert break_even.break_even_tokens(prefill_tokens_per_s=10**6, restore_bytes_per_s=1 << 20,
                                        bytes_per_token=bpt, overhead_s=0.0, block_size=32,
                                        never=4096) == 4096
    with pytest.raises(ValueError):
        break_even.break_even_tokens(prefill_tokens_per_s=0, restore_bytes_per_s=1,
                                     bytes_per_token=1, overhead_s=0, block_size=32, never=1)


def test_gate_inputs_from_fitted_lines_reproduce_the_measured_crossing():
    lengths = [128, 256, 512, 1024, 2048]
    rec = [0.010 + n * 200e-6 for n in lengths]
    bpt = 16384
    rk = [0.060 + n * bpt / (1 << 30) for n in lengths]   # 50 ms more fixed cost, 1 GiB/s
    fr, fk = break_even.fit_line(lengths, rec), break_even.fit_line(lengths, rk)
    assert fr == pytest.approx((0.010, 200e-6)) and fk[1] == pytest.approx(bpt / (1 << 30))
    inputs = break_even.break_even_inputs_from_fits(fr, fk, bpt)
    assert inputs["prefill_tokens_per_s"] == pytest.approx(5000)
    assert inputs["restore_bytes_per_s"] == pytest.approx(1 << 30)
    assert inputs["overhead_s"] == pytest.approx(0.050)
    from rangekv.bench.serve_workloads import break_even_config
    cfg = break_even_config(inputs, lengths)
    assert cfg["min_hit_tokens"] == "auto" and parse_config({"store_dir": "/x", **cfg})
    h = break_even.break_even_tokens(prefill_tokens_per_s=cfg["break_even_prefill_tokens_per_s"],
                                     restore_bytes_per_s=cfg["break_even_restore_bandwidth"],
                                     bytes_per_token=bpt,
                                     overhead_s=cfg["break_even_overhead_us"] * 1e-6,
                                     block_size=32, never=10**6)
    crossed = st.crossing(lengths, rec, rk)
    assert h - 32 < crossed <= h + 1   # the gate's threshold is the measured crossing, in blocks
    with pytest.raises(ValueError):
        break_even.fit_line([5, 5], [1, 2])


def test_gate_verdict_judges_each_decision_on_the_ungated_arms():
    from rangekv.bench.serve_workloads import gate_verdict

    lengths = [128, 256, 512]
    rec = {"median_s": [0.10, 0.20, 0.40]}
    plain = {"median_s": [0.12, 0.15, 0.16]}
    # Threshold 256: recompute at 128 (recompute was faster there), restore above.
    good = {"median_s": [0.30, 0.151, 0.161], "cached_tokens": [[0], [256], [512]]}
    v = gate_verdict(good, rec, plain, lengths, 256, {}, "disk", 10.0, 0.05)
    assert v["decisions"] == ["recompute", "restore", "restore"] and v["decisions_ok"] is True
    assert v["chosen_minus_other_ms"] == pytest.approx([-20.0, -50.0, -240.0])
    assert v["worse"] == [] and v["missed"] == []  # the gate arm's slow 128: noise
    assert v["excess_ms"] == pytest.approx([200.0, 1.0, 1.0])
    # Threshold 512: it recomputes at 256 where restoring was 50 ms faster: worse there; it
    # restores at 128 where recomputing was 20 ms faster (missed, not worse than no gate), and
    # that request restored below the threshold, which breaks decisions_ok.
    bad = {"median_s": [0.101, 0.20, 0.161], "cached_tokens": [[128], [0], [512]]}
    v = gate_verdict(bad, rec, plain, lengths, 512, {}, "disk", 10.0, 0.05)
    assert v["worse"] == [256] and v["missed"] == [128] and v["decisions_ok"] is False
    assert v["chosen_minus_other_ms"][1] == pytest.approx(50.0)


def test_config_accepts_auto_and_names_what_it_needs():
    cfg = parse_config({"store_dir": "/x", "min_hit_tokens": "auto",
                        "break_even_prefill_tokens_per_s": 5000,
                        "break_even_restore_bandwidth": "2GiB"})
    assert cfg.min_hit_tokens == "auto" and cfg.break_even_restore_bandwidth == 2 << 30
    assert parse_config({"store_dir": "/x"}).break_even_restore_bandwidth == "probe"
    assert parse_config({"store_dir": "/x", "min_hit_tokens": 256}).min_hit_tokens == 256
    with pytest.raises(ConfigError, match="needs break_even_prefill_tokens_per_s"):
        parse_config({"store_dir": "/x", "min_hit_tokens": "auto"})
    with pytest.raises(ConfigError, match="min_hit_tokens: expected an integer >= 0 or 'auto'"):
        parse_config({"store_dir": "/x", "min_hit_tokens": "sometimes"})
    with pytest.raises(ConfigError, match="break_even_restore_bandwidth: expected a size"):
        parse_config({"store_dir": "/x", "break_even_restore_bandwidth": "fast"})


def test_config_takes_the_old_gate_keys_with_a_warning(caplog):
    """gate_* were the break-even keys before "gate" came to mean the read gate only."""
    old = {"gate_prefill_tokens_per_s": 5000, "gate_restore_bandwidth": "2GiB",
           "gate_overhead_us": 1500}
    with caplog.at_level(logging.WARNING, logger="vllm.rangekv"):
        cfg = parse_config({"store_dir": "/x", "min_hit_tokens": "auto", **old})
    assert (cfg.break_even_prefill_tokens_per_s, cfg.break_even_restore_bandwidth,
            cfg.break_even_overhead_us) == (5000, 2 << 30, 1500)
    for key in old:
        assert any(key in r.getMessage() and "deprecated" in r.getMessage()
                   for r in caplog.records), key
    with pytest.raises(ConfigError, match="gate_overhead_us: the old name of break_even_overhead"):
        parse_config({"store_dir": "/x", "gate_overhead_us": 1, "break_even_overhead_us": 2})


def test_probe_reads_back_what_it_wrote_and_leaves_nothing(tmp_path):
    bps, mode = break_even.probe_read_bytes_per_s(str(tmp_path), probe_bytes=8 << 20)
    assert bps > 0 and mode in ("O_DIRECT", "buffered")
    assert os.listdir(tmp_path) == []
    _, mode = break_even.probe_read_bytes_per_s(str(tmp_path), probe_bytes=4 << 20, direct=False)
    assert mode == "buffered"


# ---- request builders -----------------------------------------------------------------------

def test_docqa_requests_are_round_robin_fresh_questions_per_level():
    pytest.importorskip("torch")
    from rangekv.bench.serve_workloads import docqa_blocks, docqa_requests

    a = bench_args("--docs", "3", "--doc-tokens", "96", "--questions", "2",
                   "--question-tokens", "8", "--answer-tokens", "2", "--concurrency", "1,4",
                   "--cache-docs", "1.5")
    phases, meta = docqa_requests(a)
    assert [p["name"] for p in phases] == ["warm", "c1", "c4"]
    assert [p["concurrency"] for p in phases] == [1, 1, 4]
    c1 = phases[1]["requests"]
    assert [r["id"] for r in c1] == ["c1-q0-d0", "c1-q0-d1", "c1-q0-d2",
                                     "c1-q1-d0", "c1-q1-d1", "c1-q1-d2"]
    docs = [r["prompt"][:96] for r in phases[0]["requests"]]
    assert all(r["prompt"][:96] == docs[int(r["id"][-1])] for r in c1 + phases[2]["requests"])
    questions = [tuple(r["prompt"][96:]) for p in phases for r in p["requests"]]
    assert len(set(questions)) == len(questions)  # every question fresh
    # vLLM's cache: 1.5 documents, but never below one full-length request.
    assert meta["num_gpu_blocks"] == docqa_blocks(a) == (
        max(-(-int(1.5 * 106) // 32), -(-170 // 32)) + 1)


def test_breakeven_requests_store_then_measure_each_length():
    pytest.importorskip("torch")
    from rangekv.bench.serve_workloads import breakeven_requests

    a = bench_args("--be-lengths", "64,100,256", "--be-reps", "2", "--be-suffix", "16")
    reqs, meta = breakeven_requests(a)
    assert meta["prefix_lengths"] == [64, 96, 256]  # whole blocks
    ids = [r["id"] for r in reqs]
    assert ids[:4] == ["warm", "store-64", "measure-64-0", "measure-64-1"]
    m = [r for r in reqs if r["id"].startswith("measure-256")]
    s = next(r for r in reqs if r["id"] == "store-256")
    assert all(r["prompt"][:256] == s["prompt"][:256] and len(r["prompt"]) == 272 for r in m)
    assert m[0]["prompt"][256:] != m[1]["prompt"][256:]


# ---- the client against a fake streaming server ---------------------------------------------

class _Fake(BaseHTTPRequestHandler):
    barrier: threading.Barrier
    lock = threading.Lock()
    inflight = 0
    peak = 0

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = PROM.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert req["stream"] and req["stream_options"] == {"include_usage": True}
        with _Fake.lock:
            _Fake.inflight += 1
            _Fake.peak = max(_Fake.peak, _Fake.inflight)
        try:
            _Fake.barrier.wait(timeout=20)  # 4 requests must be in flight together
        finally:
            with _Fake.lock:
                _Fake.inflight -= 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n = len(req["prompt"])
        for tok in (n, n + 1):
            chunk = {"choices": [{"token_ids": [tok], "logprobs": {"token_logprobs": [-0.5]}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": n,
                                          "prompt_tokens_details": {"cached_tokens": n // 2}}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


def test_client_runs_phases_concurrently_and_reads_usage_and_metrics():
    _Fake.barrier = threading.Barrier(4)
    _Fake.peak = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        reqs = [{"id": f"r{i}", "prompt": list(range(10 + i)), "max_tokens": 2} for i in range(8)]
        out = run_phases("127.0.0.1", srv.server_address[1], "bench",
                         [{"name": "c4", "concurrency": 4, "metrics": True, "requests": reqs}], 30)
    finally:
        srv.shutdown()
    ph = out["phases"][0]
    assert _Fake.peak == 4 and ph["concurrency"] == 4
    assert [r["id"] for r in ph["results"]] == [f"r{i}" for i in range(8)]  # request order
    for i, r in enumerate(ph["results"]):
        assert r["error"] is None and r["token_ids"] == [10 + i, 11 + i]
        assert r["cached_tokens"] == (10 + i) // 2 and r["prompt_tokens"] == 10 + i
        assert 0 <= r["start_s"] <= ph["wall_s"] and 0 < r["ttft_s"] <= r["total_s"]
    assert ph["metrics_after"]["vllm:prefix_cache_hits_total"] == 300.0


# ---- plots ----------------------------------------------------------------------------------

def test_plot_series_and_pngs(tmp_path):
    res = single_results()
    res["docqa"] = docqa_result()
    res["breakeven"] = {"prefix_lengths": [128, 256],
                        "arms": [{"name": "recompute", "median_s": [0.1, 0.2],
                                  "ttft_s": [[0.1], [0.2]]},
                                 {"name": "rangekv shm", "median_s": [0.12, 0.15],
                                  "ttft_s": [[0.12], [0.15]]}],
                        "crossings": {"rangekv shm": 170.0}}
    s = plots.objects_series(res)
    assert [n for n, _ in s["arms"]["rangekv"]] == [32, 256]
    assert s["arms"]["rangekv LW"][0][0] == 128 and set(s["refs"]) == {"recompute", "resident"}
    d = plots.docqa_series(res["docqa"])
    assert d[1]["recompute"] == [0.3, 0.4] and set(d[4]) == {"rangekv + prefix cache"}
    series = plots.breakeven_series(res["breakeven"])
    assert series["arms"]["rangekv shm"]["median_s"] == [0.12, 0.15]
    pytest.importorskip("matplotlib")
    paths = plots.plot_all(res, str(tmp_path / "plots"))
    assert [os.path.basename(p) for p in paths] == ["ttft_vs_objects.png", "docqa_ttft.png",
                                                    "breakeven.png"]
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_store_capacity_is_bounded_by_the_workload_in_whole_packs():
    from rangekv.bench.harness import store_capacity

    a = bench_args("--layers", "2", "--connector-extra", '{"stripe_bytes": "1MiB"}')
    assert store_capacity(a, 100) == 8 * 2 * (1 << 20)                # at least 8 packs
    tokens = 100_000                                                 # 2 x 100k x 16 KiB = 3.05 GiB
    cap = store_capacity(a, tokens)
    assert cap % (2 << 20) == 0
    assert 2 * tokens * 2 * 8 * 128 * 2 * 2 <= cap < 2 * tokens * 16384 + (2 << 20)


def test_both_dtypes_keep_the_8b_kv_bytes_per_token_layer():
    from types import SimpleNamespace

    from rangekv.bench import serve

    for dtype, heads in (("bfloat16", 8), ("float32", 4)):
        a = SimpleNamespace(dtype=dtype, layers=4)
        serve.resolve_dtype(a)
        assert (a.dtype, a.kv_heads) == (dtype, heads)
        # 4 KiB per token per layer, like Llama-3.1-8B
        assert serve.kv_bytes_per_token(a) == 4 * 4096
    pytest.importorskip("torch", reason="dtype auto probes bf16 speed with torch")
    a = SimpleNamespace(dtype="auto", layers=1)
    serve.resolve_dtype(a)
    assert a.dtype in ("bfloat16", "float32") and serve.kv_bytes_per_token(a) == 4096


def test_single_requests_pair_every_restore_with_a_resident_run_and_alternate_their_order():
    from rangekv.bench.serve import single_requests

    prefix, prompts = [1, 2], [[1, 2, 10 + r] for r in range(4)]
    other = [[100 + r] * 40 for r in range(5)]
    resident = [[200 + r] for r in range(4)]
    ids = [q["id"] for q in single_requests("rangekv", prefix, prompts, other, resident, 2)]
    assert ids == ["warm", "store-prefix",
                   "reset-0", "measure-0", "resident-0",                  # RangeKV first
                   "reset-1a", "prime-1", "resident-1", "reset-1", "measure-1",  # resident first
                   "reset-2", "measure-2", "resident-2",
                   "reset-3a", "prime-3", "resident-3", "reset-3", "measure-3"]
    reqs = {q["id"]: q for q in single_requests("rangekv", prefix, prompts, other, resident, 2)}
    assert reqs["measure-1"]["prompt"] == prompts[1]
    assert reqs["resident-1"]["prompt"] == prefix + resident[1]
    assert reqs["prime-1"]["prompt"] == prefix + other[1][:32]  # short: the prefix plus 32 tokens
    assert reqs["reset-1"] == {"id": "reset-1", "action": "reset"}
    # Unpaired arms: no resets; vLLM alone primes its own cache before each measured prompt.
    ids = [q["id"] for q in single_requests("resident", prefix, prompts, other, resident, 2)]
    assert ids == ["warm"] + [x for r in range(4) for x in (f"prime-{r}", f"measure-{r}")]
    ids = [q["id"] for q in single_requests("recompute", prefix, prompts, other, resident, 2)]
    assert ids == ["warm"] + [f"measure-{r}" for r in range(4)]


def test_gate_fitted_at_the_short_end_finds_the_crossing_of_a_superlinear_prefill():
    # Prefill grows quadratically with the prefix (attention); restoring is 30 ms of fixed cost
    # plus 1 GiB/s. A line through every length puts the crossing far too long (a large fitted
    # "overhead"); lines through the three shortest lengths put it within a block.
    lengths = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    bpt = 16384
    rec = [0.005 + n * 300e-6 + n * n * 2.5e-7 for n in lengths]
    rk = [0.035 + n * bpt / (1 << 30) for n in lengths]
    crossed = st.crossing(lengths, rec, rk)
    assert 64 < crossed < 128

    def threshold(inputs):
        from rangekv.bench.serve_workloads import break_even_config
        cfg = break_even_config(inputs, lengths)
        return break_even.break_even_tokens(
            prefill_tokens_per_s=cfg["break_even_prefill_tokens_per_s"],
            restore_bytes_per_s=cfg["break_even_restore_bandwidth"], bytes_per_token=bpt,
            overhead_s=cfg["break_even_overhead_us"] * 1e-6, block_size=32, never=10**6)

    whole = break_even.break_even_inputs_from_fits(break_even.fit_line(lengths, rec),
                                                   break_even.fit_line(lengths, rk), bpt)
    assert threshold(whole) > 4 * crossed  # what the full-range fit did
    short = break_even.break_even_inputs_from_short_end(lengths, rec, rk, bpt, points=3)
    assert short["fit_lengths"] == [32, 64, 128]
    h = threshold(short)
    assert crossed - 32 <= h <= crossed + 32
    # Lengths with a missing median are skipped; fewer than two usable ones cannot be fitted.
    fitted = break_even.break_even_inputs_from_short_end(lengths, [None] + rec[1:], rk, bpt)
    assert fitted["fit_lengths"] == [64, 128, 256]
    with pytest.raises(ValueError):
        break_even.break_even_inputs_from_short_end([32, 64], [None, 1.0], [1.0, 1.0], bpt)


def test_phase_means_come_from_the_connector_counters():
    text = "\n".join([
        '# TYPE vllm:rangekv_lookup_s_total counter',
        'vllm:rangekv_lookup_s_total{engine="0",model_name="m"} 0.03',
        'vllm:rangekv_lookup_s_count_total{engine="0",model_name="m"} 6.0',
        'vllm:rangekv_last_layer_ready_s_total{engine="0",model_name="m"} 1.2',
        'vllm:rangekv_last_layer_ready_s_count_total{engine="0",model_name="m"} 4.0',
        'vllm:rangekv_claim_s_count_total{engine="0",model_name="m"} 0.0'])
    means = st.phase_means_ms(st.parse_prometheus(text))
    # The claim phase was never observed: no mean.
    assert means == pytest.approx({"lookup": 5.0, "last_layer_ready": 300.0})
    assert st.phase_means_ms(None) == {}


def test_table3_shows_the_phases_where_measured():
    r = single_results()
    r["arms"][-1]["phases_ms"] = {"lookup": 1.25, "last_layer_ready": 80.0}
    t = st.table3(r).splitlines()
    assert "| phase: lookup (ms) | - | - | - | 1.2 |" in t
    assert "| phase: last layer ready (ms) | - | - | - | 80.0 |" in t
    assert not any("claim" in line for line in t)


def test_arms_vary_the_connectors_granularity_on_block_32_servers():
    from rangekv.bench import serve

    args = bench_args("--granularities", "256,32", "--lw-granularities", "128,32", "--no-ablations",
                      "--layers", "4")
    arms = {a["name"]: a for a in serve.arm_configs(args, "/tmp/x/stores", "/dev/shm/x")}
    plain, lw = arms["rangekv 32"], arms["rangekv 256 LW"]
    assert plain["block_size"] == lw["block_size"] == 32
    assert plain["extra"]["reuse_granularity"] == 256 and plain["extra"]["layerwise"] is False
    assert lw["extra"]["reuse_granularity"] == 128 and lw["extra"]["layerwise"] is True
    assert "rangekv 1024 LW" in arms and arms["rangekv 32 shm"]["extra"]["layerwise"] is False
    assert "--shutdown-timeout" in plain["args"]
    old = {a["name"]: a for a in serve.arm_configs(
        bench_args("--granularities", "256", "--granularity-by", "block", "--no-ablations"),
        "/tmp/x/stores", "/dev/shm/x")}
    assert old["rangekv 32"]["block_size"] == 256
    assert "reuse_granularity" not in old["rangekv 32"]["extra"]

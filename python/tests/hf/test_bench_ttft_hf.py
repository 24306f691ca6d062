"""rangekv bench ttft-hf runs end to end on CPU at a tiny shape (every arm, one repetition)."""


from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("rangekv._core")

from rangekv.bench.__main__ import main


def test_ttft_hf_small_cpu(tmp_path, capsys):
    out = tmp_path / "ttft.json"
    rc = main(["ttft-hf", "--device", "cpu", "--layers", "2", "--prefix", "256", "--suffix", "96",
               "--granularities", "64,32,16,8", "--reps", "1", "--stripe-mib", "1",
               "--tmp-dir", str(tmp_path), "--json", str(out), "--quiet"])
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["all_exact"] and r["all_tokens_match"]
    arms = {a["arm"]: a for a in r["arms"]}
    assert {"recompute", "resident", "rangekv 4", "rangekv 32", "rangekv 8 LW"} <= set(arms)
    assert sum(a["kind"] == "ablation" for a in r["arms"]) == 8
    assert {"per-object 4", "per-object 8", "per-object 16", "per-object 32"} <= set(arms)
    for a in r["arms"]:
        assert len(a["samples_s"]) == 1 and a["errors"] == []
        if a["kind"] == "per_object":
            # One native read and one transfer call per object, restored bytes exact.
            assert a["hits"] == [256] and a["exact_vs_resident"] == [True]
            assert a["store_work"]["native_writes"] == a["objects"]
            assert a["restore_work"]["native_reads"] == a["objects"]
        if a["kind"] in ("rangekv", "ablation"):
            assert a["hits"] == [256]
            assert a["restore_work"]["scatter_launches"] >= 1
            assert len(a["paired_resident_s"]) == 1 and a["exact_vs_resident"] == [True]
            assert a["max_logit_diff_resident"] == [0.0] and a["tokens_match"] == [True]
    assert arms["read_issue=object @ 4"]["restore_work"]["native_reads"] > \
        arms["rangekv 4"]["restore_work"]["native_reads"]
    table = capsys.readouterr().out
    assert "| Objects | 4 | 8 | 16 | 32 | 8 LW |" in table
    assert "RangeKV - resident (ms)" in table
    assert "| Per-object model |" in table

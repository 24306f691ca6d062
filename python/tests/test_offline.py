"""rangekv.inspect / rangekv.fsck over stores written through Python."""

from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np
import pytest

import rangekv
from rangekv._offline import cli_path

from conftest import L, random_layers, store_all


def test_inspect_and_fsck_a_clean_store(make_engine, store_dir):
    eng = make_engine()
    ns = eng.namespace
    store_all(eng, list(range(100)), random_layers("flash_attn_nhd", 16, seed=41), np.arange(100))
    eng.close()
    info = rangekv.inspect(store_dir)
    assert info["pack_file"]["namespace"] == ns
    assert info["pack_file"]["geometry"]["layers"] == L
    assert info["state"]["index"] == "loaded" and not info["state"]["dirty"]
    report = rangekv.fsck(store_dir)
    assert report["ok"] and report["problems"] == [] and report["packs_checked"] >= 1
    assert rangekv.fsck(store_dir, payload=False)["ok"]


def test_fsck_finds_a_flipped_payload_byte(make_engine, store_dir):
    eng = make_engine()
    store_all(eng, list(range(100)), random_layers("flash_attn_nhd", 16, seed=42), np.arange(100))
    eng.close()
    info = rangekv.inspect(store_dir)
    path = info["pack_file"]["path"]
    with open(path, "r+b") as f:
        f.seek(info["pack_file"]["data_offset"] + 7)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x5A]))
    report = rangekv.fsck(store_dir)
    assert not report["ok"]
    assert any(p["kind"] == "payload_digest" for p in report["problems"])


def test_inspect_without_a_store(tmp_path):
    with pytest.raises(rangekv.NotFound):
        rangekv.inspect(tmp_path)
    with pytest.raises(rangekv.NotFound):
        rangekv.fsck(tmp_path / "missing")


def test_inspect_lists_each_store_with_its_identity(make_engine, tmp_path):
    """A directory of stores (a connector's store_dir: rank-<r>/) is listed store by store, each
    with the identity record its engine wrote, checked against its namespace."""
    key = {"engine": "vllm", "rope": {"rope_theta": 10000, "rope_type": "default"},
           "weights": {"kind": "files", "sha256": "ab"}}
    semantic = json.dumps(key, sort_keys=True, separators=(",", ":"))
    (tmp_path / "kv").mkdir()
    for rank in range(2):
        make_engine(directory=str(tmp_path / "kv" / f"rank-{rank}"), semantic_config=semantic,
                    tp_size=2, tp_rank=rank).close()
    stores = rangekv.inspect(tmp_path / "kv")["stores"]
    assert [os.path.basename(s["store_dir"]) for s in stores] == ["rank-0", "rank-1"]
    for rank, s in enumerate(stores):
        identity = s["identity"]
        assert identity["verified"], identity
        assert identity["fields"] == key
        assert identity["record"]["tp_rank"] == rank
        assert identity["record"]["namespace"] == s["pack_file"]["namespace"]
    text = subprocess.run([cli_path(), "inspect", "--dir", str(tmp_path / "kv")],
                          capture_output=True, text=True, check=True).stdout
    assert text.count("identity   verified: the namespace is derived from these fields") == 2
    assert re.search(r"^  rope\.rope_theta +10000$", text, re.M), text
    # An edited record no longer derives the store's namespace, and says so.
    path = tmp_path / "kv" / "rank-0" / "identity.json"
    record = json.loads(path.read_text())
    record["semantic_config"] = semantic.replace("10000", "20000")
    path.write_text(json.dumps(record))
    identity = rangekv.inspect(tmp_path / "kv" / "rank-0")["identity"]
    assert not identity["verified"] and "do not derive" in identity["problem"]


def test_a_store_of_another_identity_is_replaced_only_when_asked(make_engine, store_dir):
    eng = make_engine(semantic_config='{"weights":"a"}')
    store_all(eng, list(range(100)), random_layers("flash_attn_nhd", 16, seed=43), np.arange(100))
    eng.close()
    # Refused by default (rangekv.Engine's on_store_mismatch="fail"): the store stays.
    with pytest.raises(rangekv.NamespaceMismatch):
        make_engine(semantic_config='{"weights":"b"}')
    assert rangekv.inspect(store_dir)["namespaces"][0]["cached_tokens"] > 0
    # Replaced when asked: empty, and none of the old KV is found.
    eng = make_engine(semantic_config='{"weights":"b"}', on_store_mismatch="replace")
    assert eng.recovery["created"]
    hit, _ = eng.lookup(list(range(100)), rangekv.Envelope("after"), 16)
    assert hit == 0
    eng.close()
    with pytest.raises(rangekv.InvalidArgument, match="on_store_mismatch"):
        make_engine(on_store_mismatch="sometimes")

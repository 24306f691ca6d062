"""rangekv.inspect / rangekv.fsck over stores written through Python."""

from __future__ import annotations

import os

import numpy as np
import pytest

import rangekv

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

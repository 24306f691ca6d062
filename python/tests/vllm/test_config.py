"""kv_connector_extra_config parsing (no engine)."""

import pytest

pytest.importorskip("vllm")

from rangekv.vllm import parse_config  # noqa: E402


def test_defaults_and_units():
    c = parse_config({"store_dir": "/x", "capacity": "512GiB", "stripe_bytes": 4096,
                      "layerwise": True})
    assert c.capacity == 512 << 30 and c.stripe_bytes == 4096 and c.layerwise
    assert c.lookup_timeout_ms == 2000 and c.checksum == "always"


@pytest.mark.parametrize("extra,word", [
    ({}, "store_dir"),
    ({"store_dir": "/x", "nope": 1}, "nope"),
    ({"store_dir": "/x", "capacity": "12 parsecs"}, "capacity"),
    ({"store_dir": "/x", "checksum": "sometimes"}, "checksum"),
    ({"store_dir": "/x", "layerwise": "yes"}, "layerwise"),
    ({"store_dir": "/x", "lookup_timeout_ms": 0}, "lookup_timeout_ms"),
])
def test_bad_values_name_the_key(extra, word):
    with pytest.raises(ValueError, match=word):
        parse_config(extra)

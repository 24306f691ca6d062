"""rangekv.vllm: RangeKV as an out-of-tree KV connector of vLLM (0.25.1 to 0.34, versions.py).

Enable it with ``--kv-transfer-config`` naming ``"kv_connector":"RangeKVConnector"`` and
``"kv_connector_module_path":"rangekv.vllm"`` (docs/integrations/vllm.md).

The connector classes load on first use (vLLM reads them with ``getattr`` on this module), so
the pure-Python parts (``config``, ``break_even``) import without vLLM or torch.
"""

from .config import KEYS, ConfigError, ConnectorConfig, parse_config, parse_size

__all__ = ["RangeKVConnector", "RangeKVMetadata", "ConnectorConfig", "ConfigError",
           "parse_config", "parse_size", "KEYS"]


def __getattr__(name: str):
    if name in ("RangeKVConnector", "RangeKVMetadata"):
        from . import connector

        return getattr(connector, name)
    raise AttributeError(f"module 'rangekv.vllm' has no attribute {name!r}")

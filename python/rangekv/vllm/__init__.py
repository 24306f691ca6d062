"""rangekv.vllm: RangeKV as an out-of-tree KV connector of vLLM 0.32.

Enable it with ``--kv-transfer-config`` naming ``"kv_connector":"RangeKVConnector"`` and
``"kv_connector_module_path":"rangekv.vllm"`` (docs/integrations/vllm.md).
"""

from .config import KEYS, ConfigError, ConnectorConfig, parse_config, parse_size  # noqa: F401
from .connector import RangeKVConnector, RangeKVMetadata  # noqa: F401

__all__ = ["RangeKVConnector", "RangeKVMetadata", "ConnectorConfig", "ConfigError",
           "parse_config", "parse_size", "KEYS"]

"""RangeKV as an out-of-tree vLLM KV connector (vLLM 0.32).

Enable with::

    --kv-transfer-config '{"kv_connector":"RangeKVConnector","kv_connector_module_path":"rangekv.vllm",
                           "kv_role":"kv_both","kv_connector_extra_config":{"store_dir":"/nvme/rangekv"}}'

See docs/integrations/vllm.md for every option.
"""

from ._config import ConnectorConfig, parse_config  # noqa: F401
from ._connector import RangeKVConnector, RangeKVMetadata, RangeKVStats  # noqa: F401

__all__ = ["RangeKVConnector", "RangeKVMetadata", "RangeKVStats", "ConnectorConfig", "parse_config"]

"""Type stubs of rangekv._core (python/src/*.cc). Use the rangekv package, not this module."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal

from ._errors import Error

__version__: str

# Anything 1-D of ints: list[int], tuple, numpy int array, torch CPU int tensor, DLPack vector.
IntVector = Any
# A per-layer tensor: torch.Tensor, numpy.ndarray or any object exporting __dlpack__.
Tensor = Any
# rangekv.Envelope (or any object with request_id, session_id, attempt, rank), or a str
# request id (session 0, attempt 0, rank 0).
EnvelopeLike = Any
# torch.cuda.Stream, an int cudaStream_t, or an object with `cuda_stream` / `ptr`.
StreamLike = Any

def layouts() -> str: ...
def status_code_names() -> list[str]: ...
def build_info() -> dict[str, str]: ...

class RestoreOutcome:
    @property
    def ok(self) -> bool: ...
    @property
    def status(self) -> Error | None: ...
    @property
    def requested(self) -> tuple[int, int]: ...
    @property
    def failed(self) -> list[tuple[int, int]]: ...
    @property
    def delivered_tokens(self) -> int: ...
    @property
    def work(self) -> dict[str, int]: ...

class StoreOutcome:
    @property
    def ok(self) -> bool: ...
    @property
    def status(self) -> Error | None: ...
    @property
    def disposition(self) -> Literal["storing", "joined", "cached"]: ...
    @property
    def stored(self) -> tuple[int, int]: ...
    @property
    def visible(self) -> bool: ...
    @property
    def packs(self) -> list[tuple[int, int, int, int]]:
        """[(slot, generation, begin, end)]: the packs the store reserved, in path order."""
    @property
    def work(self) -> dict[str, int]: ...

class RestoreHandle:
    @property
    def tokens(self) -> tuple[int, int]: ...
    @property
    def finished(self) -> bool: ...
    @property
    def bound(self) -> bool: ...
    def bind_slots(self, kv_layers: Sequence[Tensor], slot_mapping: IntVector) -> None: ...
    def wait_layer(self, layer: int, timeout: float | None = None) -> None: ...
    def stream_wait_layer(self, layer: int, stream: StreamLike) -> None: ...
    def finish(self) -> RestoreOutcome: ...
    def cancel(self) -> None: ...
    def __enter__(self) -> RestoreHandle: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class StoreHandle:
    @property
    def disposition(self) -> Literal["storing", "joined", "cached"]: ...
    @property
    def stored_tokens(self) -> tuple[int, int]: ...
    @property
    def extracted(self) -> bool: ...
    @property
    def finished(self) -> bool: ...
    def layer_produced(self, layer: int, stream: StreamLike | None = None) -> None: ...
    def wait_extracted(self, timeout: float | None = None) -> None: ...
    def finish(self, detach: bool = False) -> StoreOutcome: ...
    def __enter__(self) -> StoreHandle: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class Engine:
    def __init__(
        self,
        store_dir: str,
        *,
        layers: int,
        kv_heads: int,
        head_size: int,
        dtype: Any = "bfloat16",
        block_size: int = 16,
        layout: str = "flash_attn_nhd",
        mla_latent_size: int = 0,
        model_id: str = "",
        revision: str = "",
        semantic_config: str = "",
        tp_size: int = 1,
        tp_rank: int = 0,
        tags: Sequence[str] = (),
        stripe_bytes: int = 32 << 20,
        capacity_bytes: int = 16 << 30,
        device: Literal["auto", "host", "cuda"] = "auto",
        cuda_device: int = 0,
        io_engine: Literal["auto", "posix", "uring"] = "auto",
        direct_io: bool = True,
        checksum: Literal["always", "off"] = "always",
        durability: str = "periodic:200",
        checkpoint_interval_ms: int = 60000,
        ablations: str = "",
        read_banks: int = 8,
        read_bank_bytes: int = 0,
        read_workers: int = 4,
        read_io_threads: int = 0,
        prefetch_banks: int = 7,
        lookahead_layers: int = 4,
        max_inflight_restores: int = 16,
        store_banks: int = 8,
        store_bank_bytes: int = 0,
        group_workers: int = 0,
        write_workers: int = 32,
        layer_group: int = 4,
        max_inflight_stores: int = 16,
        max_request_tokens: int = 262144,
        max_removed_ranges: int = 4096,
        store_service: str = "",
        tenant: str = "default",
        store_service_spin_us: int = 200,
        share_reads: bool = False,
        read_gate: bool = True,
        remote: str = "",
        remote_endpoint: str = "",
        directory: str = "",
        remote_publish: bool = True,
        remote_get_bytes: int = 0,
        remote_lookup_timeout_ms: int = 250,
        remote_read_timeout_ms: int = 10000,
        remote_capacity_bytes: int = 0,
        upload_bytes_per_s: int = 0,
        store_service_timeout_ms: int = 60000,
        on_store_mismatch: Literal["fail", "replace"] = "fail",
    ) -> None: ...
    @property
    def geometry(self) -> dict[str, Any]: ...
    @property
    def namespace(self) -> str: ...
    @property
    def recovery(self) -> dict[str, Any]: ...
    @property
    def options(self) -> dict[str, int]: ...
    @property
    def backends(self) -> str: ...
    @property
    def layout(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def lookup(
        self,
        tokens: IntVector,
        envelope: EnvelopeLike,
        granularity: int | None = None,
        local_tokens: int = 0,
    ) -> tuple[int, bytes]: ...
    def release_request(self, envelope: EnvelopeLike) -> None: ...
    def start_restore(
        self,
        ticket: bytes,
        envelope: EnvelopeLike,
        tokens: IntVector,
        begin_token: int = 0,
        endpoint_tokens: int | None = None,
    ) -> RestoreHandle: ...
    def begin_store(
        self,
        envelope: EnvelopeLike,
        tokens: IntVector,
        kv_layers: Sequence[Tensor],
        slot_mapping: IntVector,
    ) -> StoreHandle: ...
    def stats(self) -> dict[str, int]: ...
    def remote_stats(self) -> dict[str, int | bool]: ...
    def read_share(self) -> dict[str, int]: ...
    def drain_removed_ranges(self, max: int = 4096) -> list[tuple[int, int, int, int, bool]]:
        """[(slot, generation, begin, end, retired)], oldest first: path tokens [begin, end) of
        the pack (slot, generation) stopped being served (retired=False: its head stays)."""
    def close(self) -> None: ...
    def __enter__(self) -> Engine: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

"""The connector's break-even threshold: the shortest restore worth doing instead of recomputing.

Cost model (plain mode, where the whole prefix is delivered before the forward starts):

    restore(h)   = overhead_s + h * bytes_per_token / restore_bytes_per_s
    recompute(h) = h / prefill_tokens_per_s

Both grow linearly with the h tokens RangeKV would deliver; restoring is worth it once the
lines cross, at

    h* = overhead_s / (1 / prefill_tokens_per_s - bytes_per_token / restore_bytes_per_s)

rounded up to whole blocks. When a token costs at least as much to read as to compute, the
lines never cross and no hit is restored. `overhead_s` is the fixed cost of a restore (the
lookup answer, claim and bind, the wait for the first layer) that a recompute does not pay.

The three inputs come from measurement: ``python -m rangekv.bench serve --workload breakeven``
fits the two lines of the model above to TTFT measured through a real server at the shortest
prefix lengths (break_even_inputs_from_short_end: prefill is superlinear in the prefix, the
lines are straight only near the crossing) and prints the ``kv_connector_extra_config`` that feeds
them to the connector; the restore bandwidth can also
be probed at start-up (:func:`probe_read_bytes_per_s`). Layerwise delivery overlaps reads with
compute, so for it the same threshold is conservative (it may recompute a short hit that a
layerwise restore would have hidden).

Pure Python (no vLLM): the bench and the tests use the same functions as the connector.
"""

from __future__ import annotations

import math
import mmap
import os
import time

PROBE_BYTES = 64 << 20
_CHUNK = 4 << 20


def bytes_per_token(*, layers: int, kv_heads: int, head_size: int, dtype_bytes: int) -> int:
    """KV bytes one token occupies over all layers (K and V)."""
    return 2 * kv_heads * head_size * dtype_bytes * layers


def break_even_tokens(*, prefill_tokens_per_s: float, restore_bytes_per_s: float,
                      bytes_per_token: int, overhead_s: float, block_size: int,
                      never: int) -> int:
    """The shortest restore (tokens, a multiple of `block_size`) that beats recomputing.

    Returns `never` (the caller passes more tokens than any prompt holds) when reading a token
    costs at least as much as computing it. REQUIRES positive rates and block size,
    overhead_s >= 0.
    """
    if prefill_tokens_per_s <= 0 or restore_bytes_per_s <= 0 or block_size <= 0:
        raise ValueError("break_even_tokens: rates and block size must be positive")
    if overhead_s < 0:
        raise ValueError("break_even_tokens: overhead_s must be >= 0")
    margin_s = 1.0 / prefill_tokens_per_s - bytes_per_token / restore_bytes_per_s
    if margin_s <= 0:
        return never
    tokens = overhead_s / margin_s
    blocks = math.ceil(tokens / block_size - 1e-9)
    return min(never, max(0, blocks) * block_size)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against xs; REQUIRES two distinct xs."""
    pts = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if len({x for x, _ in pts}) < 2:
        raise ValueError("fit_line: needs points at two distinct x")
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    slope = sxy / sxx
    return my - slope * mx, slope


def break_even_inputs_from_fits(recompute: tuple[float, float], restore: tuple[float, float],
                                bytes_per_token: int) -> dict:
    """The threshold's inputs from two fitted TTFT lines (intercept s, slope s/token).

    recompute's slope is 1 / prefill throughput; restore's slope is bytes_per_token / restore
    bandwidth; the difference of intercepts is the restore's fixed overhead (never below 0).
    A slope <= 0 (noise on a flat line) gives None for that rate.
    """
    (a_r, b_r), (a_k, b_k) = recompute, restore
    return {
        "prefill_tokens_per_s": (1.0 / b_r) if b_r > 0 else None,
        "restore_bytes_per_s": (bytes_per_token / b_k) if b_k > 0 else None,
        "overhead_s": max(0.0, a_k - a_r),
    }


def break_even_inputs_from_short_end(lengths: list[int], recompute_s: list, restore_s: list,
                                     bytes_per_token: int, points: int = 3) -> dict:
    """The threshold's inputs from TTFT medians measured at `lengths`: lines fitted to the `points`
    shortest lengths with both medians (break_even_inputs_from_fits), plus the fits themselves.

    Why only the short end: the threshold decides short hits, and recompute's TTFT grows faster
    than linearly with the prefix (attention is quadratic in it). A line through every length
    up to a long prefix is steep and has a large negative intercept, which reads as a large
    restore "overhead" and a threshold far above the real crossing (measured: 1.49 s of
    fitted overhead and a 640-token threshold where restoring was faster from 128 tokens).
    Around the crossing both curves are close to straight. Raises ValueError with fewer than
    two usable lengths.
    """
    pts = sorted((n, r, k) for n, r, k in zip(lengths, recompute_s, restore_s)
                 if r is not None and k is not None)[:max(2, points)]
    fr = fit_line([p[0] for p in pts], [p[1] for p in pts])
    fk = fit_line([p[0] for p in pts], [p[2] for p in pts])
    return {"recompute": fr, "rangekv": fk, "fit_lengths": [p[0] for p in pts],
            **break_even_inputs_from_fits(fr, fk, bytes_per_token)}


def _timed_read(path: str, flags: int, buf: mmap.mmap, n: int) -> float:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        t0 = time.perf_counter()
        for off in range(0, n, _CHUNK):
            if os.preadv(fd, [buf], off) != _CHUNK:
                raise OSError(f"short read of the probe file at {off}")
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def probe_read_bytes_per_s(directory: str, *, probe_bytes: int = PROBE_BYTES,
                           direct: bool = True) -> tuple[float, str]:
    """Read bandwidth of the medium holding `directory`: writes `probe_bytes`, syncs, reads them
    back (O_DIRECT when `direct` and the file system allows it, else buffered after dropping
    the file's cached pages) and removes the file. Returns (bytes/s, how it was read).

    Raises OSError when the directory cannot hold the probe file.
    """
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f".gate-probe-{os.getpid()}")
    buf = mmap.mmap(-1, _CHUNK)  # page-aligned, as O_DIRECT requires
    buf.write(os.urandom(_CHUNK))
    n = max(_CHUNK, probe_bytes // _CHUNK * _CHUNK)
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            for off in range(0, n, _CHUNK):
                os.pwrite(fd, buf, off)
            os.fsync(fd)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, n, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        seconds, mode = -1.0, "buffered"
        if direct and hasattr(os, "O_DIRECT"):
            try:
                seconds, mode = _timed_read(path, os.O_DIRECT, buf, n), "O_DIRECT"
            except OSError:
                seconds = -1.0  # tmpfs and others refuse O_DIRECT
        if seconds < 0:
            seconds, mode = _timed_read(path, 0, buf, n), "buffered"
    finally:
        buf.close()
        try:
            os.unlink(path)
        except OSError:
            pass
    return n / max(seconds, 1e-9), mode

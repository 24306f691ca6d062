"""Device check of rangekv.hf.attention.split_attention on the 8B shape's attention (one layer):
the suffix's lower-right causal attention computed by PyTorch's fused kernel and by the split
(prefix keys unmasked + square causal, cuDNN's kernels, merged by log-sum-exp). Prints the
largest difference and each one's median time over a few calls.

    python3 scripts/gpu/attention_check.py [--prefix 49152] [--suffix 16128]
"""

import argparse
import json

import torch
from torch.nn.attention.bias import causal_lower_right

from rangekv.hf import attention


def timed(fn, reps=5):
    times = []
    for _ in range(reps + 1):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return out, sorted(times[1:])[reps // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prefix", type=int, default=49152)
    p.add_argument("--suffix", type=int, default=16128)
    a = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(1, 32, a.suffix, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, 8, a.prefix + a.suffix, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, 8, a.prefix + a.suffix, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    fused, t_fused = timed(lambda: sdpa(q, k, v, attn_mask=causal_lower_right(a.suffix, a.prefix + a.suffix),
                                        enable_gqa=True))
    split, t_split = timed(lambda: attention.split_attention(q, k, v))
    square, t_square = timed(lambda: sdpa(q, k[:, :, :a.suffix], v[:, :, :a.suffix], is_causal=True, enable_gqa=True))
    flops = 4 * 32 * 128 * a.suffix * (a.prefix + a.suffix / 2)
    print(json.dumps({
        "max_abs_diff": float((split.float() - fused.float()).abs().max()),
        "mean_abs_diff": float((split.float() - fused.float()).abs().mean()),
        "fused_lower_right_ms": t_fused, "split_ms": t_split,
        "fused_tflops": flops / t_fused / 1e9, "split_tflops": flops / t_split / 1e9,
        "square_causal_suffix_only_ms": t_square, "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled(),
    }))


if __name__ == "__main__":
    main()

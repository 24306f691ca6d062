#include "tools/bench/paged_kv.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "base/digest.h"
#include "base/units.h"

namespace rangekv::tools {

void PatternRows(uint64_t seed, uint32_t layer, uint64_t token_begin, uint64_t tokens,
                 uint64_t token_bytes, uint8_t* out) {
  const uint64_t words = token_bytes / 8;
  for (uint64_t t = 0; t < tokens; ++t) {
    const uint64_t key[3] = {seed, layer, token_begin + t};
    const uint64_t base = Hash64(key, sizeof(key));
    uint64_t* w = reinterpret_cast<uint64_t*>(out + t * token_bytes);
    for (uint64_t i = 0; i < words; ++i) w[i] = base + i * 0x9E3779B97F4A7C15ull;
  }
}

void ParallelFor(uint64_t n, const std::function<void(uint64_t, uint64_t)>& fn) {
  const uint32_t helpers = std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1, 8);
  const uint32_t threads = static_cast<uint32_t>(std::min<uint64_t>(helpers, n));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  for (uint32_t i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] { fn(n * i / threads, n * (i + 1) / threads); });
  }
  for (auto& t : pool) t.join();
}

PagedKvSpace::~PagedKvSpace() = default;

Result<std::unique_ptr<PagedKvSpace>> PagedKvSpace::Make(Device& device, const Geometry& g,
                                                         uint64_t tokens, uint64_t seed) {
  std::unique_ptr<PagedKvSpace> s(new PagedKvSpace());
  s->device_ = &device;
  s->geometry_ = g;
  const uint32_t b = g.block_size;
  const uint64_t blocks = (tokens + b - 1) / b;
  const kernels::PagedLayout layout =
      g.is_mla() ? kernels::PagedLayout::kMla : kernels::PagedLayout::kFlashAttnNhd;
  s->shape_ = {static_cast<uint32_t>(blocks), b, g.is_mla() ? 1u : g.kv_heads_per_rank,
               g.is_mla() ? g.mla_latent_size : g.head_size, g.dtype_bytes};
  RANGEKV_ASSIGN_OR_RETURN(const uint64_t layer_bytes, kernels::PagedLayerBytes(layout, s->shape_));
  s->layer_bytes_ = AlignUp(layer_bytes, kIoAlignment);
  RANGEKV_ASSIGN_OR_RETURN(s->memory_, device.AllocateDevice(s->layer_bytes_ * g.layers));
  RANGEKV_ASSIGN_OR_RETURN(s->stream_, device.CreateStream());
  if (!device.capabilities().device_memory_host_accessible) {
    RANGEKV_ASSIGN_OR_RETURN(s->host_image_, device.AllocatePinnedHost(s->layer_bytes_));
  }
  s->engine_kv_.layout = g.is_mla() ? KvCacheLayout::kMla : KvCacheLayout::kFlashAttnNhd;
  s->engine_kv_.num_blocks = blocks;
  for (uint32_t l = 0; l < g.layers; ++l) {
    uint8_t* base = s->memory_.bytes() + l * s->layer_bytes_;
    RANGEKV_ASSIGN_OR_RETURN(kernels::PagedKvView v,
                             kernels::MakePagedKvView(layout, s->shape_, base));
    s->views_.push_back(v);
    s->engine_kv_.layer_base.push_back(base);
  }
  std::vector<uint64_t> perm(blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  s->slots_.resize(tokens);
  for (uint64_t t = 0; t < tokens; ++t) {
    s->slots_[t] = static_cast<int64_t>(perm[t / b] * b + t % b);
  }
  return s;
}

template <typename Fn>
Status PagedKvSpace::ForEachLayer(bool write_back, Fn&& fn) {
  const bool host = device_->capabilities().device_memory_host_accessible;
  const kernels::PagedLayout layout =
      geometry_.is_mla() ? kernels::PagedLayout::kMla : kernels::PagedLayout::kFlashAttnNhd;
  for (uint32_t l = 0; l < geometry_.layers; ++l) {
    uint8_t* dev = memory_.bytes() + l * layer_bytes_;
    uint8_t* base = dev;
    if (!host) {
      base = host_image_.data();
      RANGEKV_RETURN_IF_ERROR(stream_->CopyDeviceToHost(base, dev, layer_bytes_));
      RANGEKV_RETURN_IF_ERROR(stream_->Synchronize());
    }
    RANGEKV_ASSIGN_OR_RETURN(kernels::PagedKvView v,
                             kernels::MakePagedKvView(layout, shape_, base));
    fn(l, v);
    if (!host && write_back) {
      RANGEKV_RETURN_IF_ERROR(stream_->CopyHostToDevice(dev, base, layer_bytes_));
      RANGEKV_RETURN_IF_ERROR(stream_->Synchronize());
    }
  }
  return OkStatus();
}

Status PagedKvSpace::Fill(uint64_t seed, uint64_t begin, uint64_t end) {
  if (end > tokens() || begin > end) return InvalidArgument("fill range beyond the KV space");
  const uint64_t s = geometry_.token_bytes;
  return ForEachLayer(true, [&](uint32_t layer, const kernels::PagedKvView& v) {
    ParallelFor(end - begin, [&](uint64_t lo, uint64_t hi) {
      std::vector<uint8_t> row(s);
      for (uint64_t t = begin + lo; t < begin + hi; ++t) {
        PatternRows(seed, layer, t, 1, s, row.data());
        const uint64_t slot = static_cast<uint64_t>(slots_[t]);
        const uint32_t blk = static_cast<uint32_t>(slot / v.block_size);
        const uint32_t off = static_cast<uint32_t>(slot % v.block_size);
        const uint8_t* src = row.data();
        for (uint32_t p = 0; p < v.num_planes; ++p) {
          for (uint32_t h = 0; h < v.num_heads; ++h) {
            std::memcpy(v.HeadAddress(p, blk, off, h), src, v.head_bytes);
            src += v.head_bytes;
          }
        }
      }
    });
  });
}

Status PagedKvSpace::Poison() {
  if (device_->capabilities().device_memory_host_accessible) {
    const uint64_t n = memory_.size_bytes();
    ParallelFor(n / kMiB + 1, [&](uint64_t lo, uint64_t hi) {
      const uint64_t a = std::min(n, lo * kMiB);
      const uint64_t b = std::min(n, hi * kMiB);
      std::memset(memory_.bytes() + a, 0xA5, b - a);
    });
    return OkStatus();
  }
  RANGEKV_RETURN_IF_ERROR(stream_->Fill(memory_.data(), 0xA5, memory_.size_bytes()));
  return stream_->Synchronize();
}

Result<uint64_t> PagedKvSpace::CountMismatches(uint64_t seed, uint64_t begin, uint64_t end) {
  if (end > tokens() || begin > end) return InvalidArgument("verify range beyond the KV space");
  const uint64_t s = geometry_.token_bytes;
  std::atomic<uint64_t> bad{0};
  RANGEKV_RETURN_IF_ERROR(ForEachLayer(false, [&](uint32_t layer, const kernels::PagedKvView& v) {
    ParallelFor(end - begin, [&](uint64_t lo, uint64_t hi) {
      std::vector<uint8_t> row(s);
      uint64_t local = 0;
      for (uint64_t t = begin + lo; t < begin + hi; ++t) {
        PatternRows(seed, layer, t, 1, s, row.data());
        const uint64_t slot = static_cast<uint64_t>(slots_[t]);
        const uint32_t blk = static_cast<uint32_t>(slot / v.block_size);
        const uint32_t off = static_cast<uint32_t>(slot % v.block_size);
        const uint8_t* want = row.data();
        bool ok = true;
        for (uint32_t p = 0; p < v.num_planes && ok; ++p) {
          for (uint32_t h = 0; h < v.num_heads && ok; ++h) {
            ok = std::memcmp(v.HeadAddress(p, blk, off, h), want, v.head_bytes) == 0;
            want += v.head_bytes;
          }
        }
        if (!ok) ++local;
      }
      bad.fetch_add(local);
    });
  }));
  return bad.load();
}

}  // namespace rangekv::tools

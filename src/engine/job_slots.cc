#include "engine/job_slots.h"

#include <cstring>

namespace rangekv::engine_internal {

Status AllocateBankMemory(const EngineContext& context, uint64_t bytes, IoEngine& io,
                          std::span<BankMemory* const> banks, const char* what) {
  Device& dev = *context.device;
  std::vector<IoBuffer> io_buffers;
  io_buffers.reserve(banks.size());
  for (BankMemory* b : banks) {
    RANGEKV_ASSIGN_OR_RETURN(b->device, dev.AllocateDevice(bytes));
    if (context.staging) {
      RANGEKV_ASSIGN_OR_RETURN(b->staging, dev.AllocatePinnedHost(bytes));
    }
    io_buffers.push_back({b->io_buffer(), bytes});
  }
  Status reg = io.RegisterBuffers(io_buffers);
  if (!reg.ok()) {
    Log(LogLevel::kInfo, std::string(what) + " banks not registered for I/O: " + reg.ToString());
  }
  return OkStatus();
}

Status SlotMapping::Allocate(Device& device_api, uint64_t max_tokens) {
  RANGEKV_ASSIGN_OR_RETURN(device, device_api.AllocateDevice(max_tokens * sizeof(int64_t)));
  RANGEKV_ASSIGN_OR_RETURN(staging, device_api.AllocatePinnedHost(max_tokens * sizeof(int64_t)));
  RANGEKV_ASSIGN_OR_RETURN(uploaded, device_api.CreateEvent());
  return OkStatus();
}

Status SlotMapping::Upload(std::span<const int64_t> mapping, Stream& stream) {
  const uint64_t bytes = mapping.size() * sizeof(int64_t);
  RANGEKV_CHECK(bytes <= device.size_bytes());
  // Done at once unless the slot's previous job left its copy queued (never recorded: done).
  RANGEKV_RETURN_IF_ERROR(uploaded->Synchronize());
  std::memcpy(staging.data(), mapping.data(), bytes);
  RANGEKV_RETURN_IF_ERROR(stream.CopyHostToDevice(device.data(), staging.data(), bytes));
  return stream.Record(*uploaded);
}

}  // namespace rangekv::engine_internal

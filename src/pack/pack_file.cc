#include "pack/pack_file.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/check.h"

namespace rangekv {
namespace {

using pack_format::kHeaderPageBytes;

// One header page, aligned so it can travel through an O_DIRECT file.
struct AlignedPage {
  AlignedPage() : bytes(static_cast<uint8_t*>(std::aligned_alloc(kIoAlignment, kHeaderPageBytes))) {
    RANGEKV_CHECK(bytes != nullptr);
    std::memset(bytes, 0, kHeaderPageBytes);
  }
  ~AlignedPage() { std::free(bytes); }
  AlignedPage(const AlignedPage&) = delete;
  AlignedPage& operator=(const AlignedPage&) = delete;
  uint8_t* bytes;
};

// Reads until `size` bytes or end of file; returns the bytes read.
Result<uint64_t> ReadUpTo(File* file, uint64_t offset, uint8_t* buf, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    RANGEKV_ASSIGN_OR_RETURN(uint64_t n, file->ReadAt(offset + done, buf + done, size - done));
    if (n == 0) break;
    done += n;
  }
  return done;
}

Status WriteFully(File* file, uint64_t offset, const uint8_t* buf, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    RANGEKV_ASSIGN_OR_RETURN(uint64_t n, file->WriteAt(offset + done, buf + done, size - done));
    if (n == 0) {
      return Status(StatusCode::kShortTransfer,
                    "pack header write made no progress at byte " + std::to_string(offset + done));
    }
    done += n;
  }
  return OkStatus();
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

uint64_t NowUnixNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string GeometryString(const Geometry& g) {
  return "L=" + std::to_string(g.layers) + " s=" + std::to_string(g.token_bytes) +
         " W=" + std::to_string(g.stripe_bytes) + " T=" + std::to_string(g.tokens_per_stripe) +
         " heads=" + std::to_string(g.kv_heads_per_rank) + "x" + std::to_string(g.head_size) +
         " latent=" + std::to_string(g.mla_latent_size) +
         " dtype=" + std::to_string(g.dtype_bytes) + " block=" + std::to_string(g.block_size);
}

}  // namespace

Result<PackFile> PackFile::Create(Env* env, const std::string& path, const Geometry& geometry,
                                  const NamespaceId& namespace_id, uint64_t pack_count,
                                  const PackCreateOptions& options) {
  auto layout = PackLayout::Make(geometry, pack_count, options.data_offset);
  if (!layout.ok()) return layout.status().WithContext("create pack file " + path);

  PackHeader header;
  header.store_uuid = options.store_uuid.is_nil() ? StoreUuid::Generate() : options.store_uuid;
  header.geometry = geometry;
  header.namespace_id = namespace_id;
  header.pack_count = pack_count;
  header.data_offset = options.data_offset;
  header.creation_time_unix_ns = NowUnixNs();

  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                           env->CreateFile(path, FileOptions{.mode = OpenMode::kReadWrite,
                                                             .direct = options.direct,
                                                             .permissions = options.permissions}));

  // Everything after this point cleans up the file it created, so a failed Create leaves no
  // half-made pack file behind (best effort: the deletion itself may fail).
  auto fill = [&]() -> Status {
    RANGEKV_RETURN_IF_ERROR(file->Allocate(layout->file_bytes()));
    AlignedPage page;
    EncodePackHeader(header, std::span<uint8_t, kHeaderPageBytes>(page.bytes, kHeaderPageBytes));
    RANGEKV_RETURN_IF_ERROR(WriteFully(file.get(), 0, page.bytes, kHeaderPageBytes));
    RANGEKV_RETURN_IF_ERROR(file->Sync());
    return env->SyncDir(DirName(path));
  };
  if (Status s = fill(); !s.ok()) {
    file.reset();
    env->DeleteFile(path).IgnoreError();
    return s.WithContext("create pack file " + path);
  }
  return PackFile(path, header, *layout, std::move(file));
}

Result<PackFile> PackFile::Open(Env* env, const std::string& path,
                                const PackExpectation& expectation,
                                const PackOpenOptions& options) {
  RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                           env->OpenFile(path, FileOptions{options.mode, options.direct}));
  AlignedPage page;
  RANGEKV_ASSIGN_OR_RETURN(uint64_t got, ReadUpTo(file.get(), 0, page.bytes, kHeaderPageBytes));
  auto decoded = DecodePackHeader(std::span<const uint8_t>(page.bytes, got));
  if (!decoded.ok()) return decoded.status().WithContext(path);
  const PackHeader& h = *decoded;

  if (expectation.store_uuid && *expectation.store_uuid != h.store_uuid) {
    return Status(StatusCode::kWrongStore, path + ": pack file of store " + h.store_uuid.ToHex() +
                                               ", expected store " +
                                               expectation.store_uuid->ToHex());
  }
  if (expectation.geometry && !(*expectation.geometry == h.geometry)) {
    return Status(StatusCode::kGeometryMismatch, path + ": pack file geometry {" +
                                                     GeometryString(h.geometry) +
                                                     "} differs from the expected {" +
                                                     GeometryString(*expectation.geometry) + "}");
  }
  if (expectation.namespace_id && *expectation.namespace_id != h.namespace_id) {
    return Status(StatusCode::kNamespaceMismatch, path + ": pack file namespace " +
                                                      h.namespace_id.ToHex() + ", expected " +
                                                      expectation.namespace_id->ToHex());
  }

  // Decode bounded every field, so Make cannot fail here; check anyway rather than assume.
  auto layout = PackLayout::Make(h.geometry, h.pack_count, h.data_offset);
  if (!layout.ok()) return Corruption(path + ": " + layout.status().message());
  RANGEKV_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size < layout->file_bytes()) {
    return Status(StatusCode::kTruncated,
                  path + ": pack file is " + std::to_string(size) + " bytes; its header (" +
                      std::to_string(h.pack_count) + " packs of " +
                      std::to_string(h.geometry.pack_bytes) + " bytes from offset " +
                      std::to_string(h.data_offset) + ") needs " +
                      std::to_string(layout->file_bytes()));
  }
  return PackFile(path, h, *layout, std::move(file));
}

}  // namespace rangekv

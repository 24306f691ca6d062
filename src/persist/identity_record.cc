#include "persist/identity_record.h"

#include <cstdio>
#include <memory>
#include <utility>

namespace rangekv::persist {
namespace {

// Writing one flat JSON object needs only string escaping; the reader (tools/inspect.cc) uses
// nlohmann/json. Keeping the library out of the store library keeps it out of the installed
// package's link interface.
void AppendJsonString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\r':
        out->append("\\r");
        break;
      default:
        if (u < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", u);
          out->append(buf);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void Field(std::string* out, const char* name, const std::string& value) {
  out->append(",\"").append(name).append("\":");
  AppendJsonString(out, value);
}

}  // namespace

std::string RenderIdentityRecord(const ModelSpec& spec, const NamespaceId& ns) {
  std::string out = "{\"format\":" + std::to_string(kIdentityRecordFormat);
  Field(&out, "namespace", ns.ToHex());
  Field(&out, "model_id", spec.model_id);
  Field(&out, "revision", spec.revision);
  Field(&out, "semantic_config", spec.semantic_config);
  Field(&out, "kv_dtype", spec.kv_dtype);
  Field(&out, "layout", std::string(KvCacheLayoutName(spec.layout)));
  out.append(",\"tp_size\":").append(std::to_string(spec.tp_size));
  out.append(",\"tp_rank\":").append(std::to_string(spec.tp_rank));
  out.append(",\"tags\":[");
  for (size_t i = 0; i < spec.tags.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendJsonString(&out, spec.tags[i]);
  }
  out.append("]}\n");
  return out;
}

Status WriteIdentityRecord(Env* env, const StorePaths& paths, const std::string& record,
                           uint32_t file_permissions) {
  if (record.size() > kMaxIdentityRecordBytes) {
    return InvalidArgument("identity record of " + std::to_string(record.size()) +
                           " bytes (at most " + std::to_string(kMaxIdentityRecordBytes) + ")");
  }
  if (ReadIdentityRecord(env, paths) == record) return OkStatus();
  const std::string tmp = paths.identity_temp();
  if (env->FileExists(tmp)) RANGEKV_RETURN_IF_ERROR(env->DeleteFile(tmp));
  {
    RANGEKV_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                             env->CreateFile(tmp, FileOptions{.mode = OpenMode::kReadWrite,
                                                              .direct = DirectIo::kOff,
                                                              .permissions = file_permissions}));
    uint64_t done = 0;
    while (done < record.size()) {
      RANGEKV_ASSIGN_OR_RETURN(const uint64_t n,
                               file->WriteAt(done, record.data() + done, record.size() - done));
      if (n == 0) return Status(StatusCode::kShortTransfer, tmp + ": short write");
      done += n;
    }
    RANGEKV_RETURN_IF_ERROR(file->Sync());
  }
  RANGEKV_RETURN_IF_ERROR(env->RenameFile(tmp, paths.identity()));
  return env->SyncDir(paths.dir);
}

std::optional<std::string> ReadIdentityRecord(Env* env, const StorePaths& paths) {
  if (!env->FileExists(paths.identity())) return std::nullopt;
  Result<std::string> text = env->ReadSmallFile(paths.identity(), kMaxIdentityRecordBytes);
  if (!text.ok()) return std::nullopt;
  return std::move(text).value();
}

}  // namespace rangekv::persist

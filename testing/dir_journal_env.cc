#include "testing/dir_journal_env.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rangekv::testing {

std::vector<std::string> DirJournalEnv::Pending() const {
  std::vector<std::string> out;
  for (const Op& op : ops_) {
    switch (op.kind) {
      case Op::Kind::kCreate:
        out.push_back("create " + op.a);
        break;
      case Op::Kind::kRename:
        out.push_back("rename " + op.a + " -> " + op.b);
        break;
      case Op::Kind::kDelete:
        out.push_back("delete " + op.a);
        break;
    }
  }
  return out;
}

Result<std::unique_ptr<File>> DirJournalEnv::CreateFile(const std::string& path,
                                                        const FileOptions& options) {
  Result<std::unique_ptr<File>> f = target()->CreateFile(path, options);
  if (f.ok()) ops_.push_back({Op::Kind::kCreate, path, "", std::nullopt});
  return f;
}

Status DirJournalEnv::RenameFile(const std::string& from, const std::string& to) {
  std::optional<std::string> saved;
  if (target()->FileExists(to)) {
    RANGEKV_ASSIGN_OR_RETURN(std::string old, target()->ReadSmallFile(to, 64 << 20));
    saved = std::move(old);
  }
  RANGEKV_RETURN_IF_ERROR(target()->RenameFile(from, to));
  ops_.push_back({Op::Kind::kRename, from, to, std::move(saved)});
  return OkStatus();
}

Status DirJournalEnv::DeleteFile(const std::string& path) {
  Result<std::string> contents = target()->ReadSmallFile(path, 64 << 20);
  RANGEKV_RETURN_IF_ERROR(target()->DeleteFile(path));
  ops_.push_back({Op::Kind::kDelete, path, "",
                  contents.ok() ? std::optional<std::string>(*contents) : std::string()});
  return OkStatus();
}

Status DirJournalEnv::SyncDir(const std::string& dir) {
  RANGEKV_RETURN_IF_ERROR(target()->SyncDir(dir));
  ops_.clear();  // tests keep every file in one directory
  return OkStatus();
}

Status DirJournalEnv::Crash(uint64_t keep_mask) {
  for (size_t i = ops_.size(); i-- > 0;) {
    if (keep_mask & (uint64_t{1} << i)) continue;
    const Op& op = ops_[i];
    switch (op.kind) {
      case Op::Kind::kCreate:
        if (target()->FileExists(op.a)) RANGEKV_RETURN_IF_ERROR(target()->DeleteFile(op.a));
        break;
      case Op::Kind::kRename:
        if (target()->FileExists(op.b)) RANGEKV_RETURN_IF_ERROR(target()->RenameFile(op.b, op.a));
        if (op.saved) RANGEKV_RETURN_IF_ERROR(target()->WriteSmallFile(op.b, *op.saved, true));
        break;
      case Op::Kind::kDelete:
        RANGEKV_RETURN_IF_ERROR(target()->WriteSmallFile(op.a, op.saved.value_or(""), true));
        break;
    }
  }
  ops_.clear();
  return OkStatus();
}

}  // namespace rangekv::testing

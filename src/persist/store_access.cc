#include "persist/store_access.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

namespace rangekv::persist {
namespace {

std::string Octal(uint32_t bits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0%03o", bits & 07777);
  return buf;
}

Status CheckPath(Env* env, const std::string& path, bool must_exist, uint32_t uid) {
  Result<PathInfo> info = env->Stat(path);
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kNotFound && !must_exist) return OkStatus();
    return info.status().WithContext("checking store permissions");
  }
  if (info->owner_uid != uid) {
    return Status(StatusCode::kUnsafePermissions,
                  "store path " + path + " is owned by uid " + std::to_string(info->owner_uid) +
                      ", not by this process's uid " + std::to_string(uid) +
                      "; refusing to open a store another user could have written");
  }
  if ((info->permissions & 0022) != 0) {
    return Status(StatusCode::kUnsafePermissions,
                  "store path " + path + " has mode " + Octal(info->permissions) +
                      " (writable by group or others); refusing to open it: `chmod go-w " + path +
                      "` if that is intended to be safe");
  }
  return OkStatus();
}

}  // namespace

uint32_t EffectiveUid() { return static_cast<uint32_t>(::geteuid()); }

Status CheckStoreAccess(Env* env, const StorePaths& paths, uint32_t uid) {
  RANGEKV_RETURN_IF_ERROR(CheckPath(env, paths.dir, /*must_exist=*/true, uid));
  const std::vector<std::string> files = {
      paths.pack(),         paths.pack_temp(),  paths.snapshot(),      paths.snapshot_temp(),
      paths.epoch(),        paths.epoch_temp(), paths.dirty_marker(),  paths.journal(),
      paths.journal_temp(), paths.identity(),   paths.identity_temp(), paths.lock(),
  };
  for (const std::string& f : files) {
    RANGEKV_RETURN_IF_ERROR(CheckPath(env, f, /*must_exist=*/false, uid));
  }
  return OkStatus();
}

Status PrepareStoreDir(Env* env, const StorePaths& paths, const StorePermissions& perms,
                       uint32_t uid) {
  Result<PathInfo> existing = env->Stat(paths.dir);
  if (!existing.ok() && existing.status().code() != StatusCode::kNotFound) {
    return existing.status().WithContext("store " + paths.dir);
  }
  if (!existing.ok()) {
    RANGEKV_RETURN_IF_ERROR(env->CreateDir(paths.dir).WithContext("creating store"));
    if (perms.dir != 0700) {
      RANGEKV_RETURN_IF_ERROR(
          env->SetPermissions(paths.dir, perms.dir).WithContext("creating store"));
    }
  } else if (!existing->directory) {
    return InvalidArgument("store path " + paths.dir + " exists and is not a directory");
  }
  return CheckStoreAccess(env, paths, uid);
}

}  // namespace rangekv::persist

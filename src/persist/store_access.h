// Who may read a store: the permission bits its directory and files are created with, and the
// check that refuses to open a store someone else could have written. KV held in a store is
// derived from users' prompts, so by default only the owning user can read it.
//
//   owner-only (default)  directory 0700, files 0600
//   group                 directory 0750, files 0640 (a shared store service whose clients
//                         share a group)
//
// Bits are set exactly at creation (Env::CreateDir, FileOptions::permissions), whatever the
// process umask. CheckStoreAccess refuses, with kUnsafePermissions naming the path and its mode,
// a store directory or store file that is owned by another user or writable by its group or by
// others (under either setting: group access is read access). It never changes an existing
// path's bits.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>

#include "env/env.h"
#include "persist/store_layout.h"
#include "rangekv/status.h"

namespace rangekv::persist {

struct StorePermissions {
  uint32_t dir = 0700;
  uint32_t file = 0600;

  static StorePermissions Owner() { return {0700, 0600}; }
  static StorePermissions Group() { return {0750, 0640}; }
};

// Creates `paths.dir` when absent (with `perms.dir` exactly), then checks the directory and every
// store file present (pack file, snapshot, dirty marker, epoch file, journal and their temporary
// names). `uid` is the user the store must belong to (the process's effective uid).
Status PrepareStoreDir(Env* env, const StorePaths& paths, const StorePermissions& perms,
                       uint32_t uid);
Status CheckStoreAccess(Env* env, const StorePaths& paths, uint32_t uid);

// This process's effective uid.
uint32_t EffectiveUid();

}  // namespace rangekv::persist

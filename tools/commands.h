// Subcommands of the `rangekv` CLI. Each is defined in its own file and attached in main.cc.
// A command's callback returns through CLI11 by throwing CLI::RuntimeError(exit_code) on
// failure (CLI11's own mechanism; the only exceptions in the tool).
#pragma once

#include <CLI/CLI.hpp>

namespace rangekv::tools {

void AddDemoCommand(CLI::App& app);               // demo.cc
void AddBenchIoCommand(CLI::App& bench);          // bench_io.cc
void AddBenchLookupCommand(CLI::App& bench);      // bench_lookup.cc
void AddBenchTransferCommands(CLI::App& bench);   // bench_transfer.cc: restore, store
void AddBenchConcurrentCommand(CLI::App& bench);  // bench_concurrent.cc
void AddBenchRemoteCommand(CLI::App& bench);      // bench_remote.cc: the cluster tier's sweep
void AddInspectCommands(CLI::App& app);           // inspect.cc: inspect, fsck
void AddServeCommand(CLI::App& app);              // serve.cc: the node's store service

// The value "auto" of `serve --read-slots` and `bench concurrent --read-gate`, turned into the
// node's read slots for this process's CPUs (engine_internal::NodeReadSlots); serve.cc.
CLI::Validator ReadSlotsAuto();

}  // namespace rangekv::tools

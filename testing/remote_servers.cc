#include "testing/remote_servers.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#ifndef RANGEKV_REMOTE_SERVERS_SH
#error "RANGEKV_REMOTE_SERVERS_SH must name testing/remote/servers.sh"
#endif

namespace rangekv::testing {
namespace {

int Run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::unique_ptr<RemoteServers>& Holder() {
  static std::unique_ptr<RemoteServers> s;
  return s;
}

}  // namespace

RemoteServers* RemoteServers::Shared(std::string* skip_reason, std::string* error) {
  static bool tried = false;
  static std::string skip, err;
  if (!tried) {
    tried = true;
    std::unique_ptr<RemoteServers> s(new RemoteServers());
    if (s->Start(&skip, &err)) Holder() = std::move(s);
  }
  *skip_reason = skip;
  *error = err;
  return Holder().get();
}

bool RemoteServers::Start(std::string* skip_reason, std::string* error) {
  dir_ = std::make_unique<TempDir>();
  const std::string cmd = "RANGEKV_SERVERS_OWNER_PID=" + std::to_string(getpid()) + " bash " +
                          std::string(RANGEKV_REMOTE_SERVERS_SH) + " start " + dir_->path() + " >" +
                          dir_->Join("start.log") + " 2>&1";
  const int rc = Run(cmd);
  if (rc == 77) {
    std::ifstream log(dir_->Join("start.log"));
    std::getline(log, *skip_reason);
    return false;
  }
  if (rc != 0) {
    std::ifstream log(dir_->Join("start.log"));
    std::string line;
    *error = "servers.sh start failed (" + std::to_string(rc) + "):";
    while (std::getline(log, line)) *error += " " + line;
    return false;
  }
  std::ifstream env(dir_->Join("env"));
  std::string line;
  while (std::getline(env, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env_[line.substr(0, eq)] = line.substr(eq + 1);
  }
  for (const char* k : {"RANGEKV_TEST_S3_ENDPOINT", "RANGEKV_TEST_S3_BUCKET", "RANGEKV_TEST_REDIS",
                        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) {
    if (!env_.count(k)) {
      *error = std::string("servers.sh wrote no ") + k;
      return false;
    }
  }
  return true;
}

void RemoteServers::KillS3() {
  (void)Run(std::string("bash ") + RANGEKV_REMOTE_SERVERS_SH + " kill-s3 " + dir_->path());
}

RemoteServers::~RemoteServers() {
  if (dir_ != nullptr) {
    (void)Run(std::string("bash ") + RANGEKV_REMOTE_SERVERS_SH + " stop " + dir_->path());
  }
}

}  // namespace rangekv::testing

// A strata-worker started as a child process on 127.0.0.1 with an
// ephemeral port (port 0; the worker prints "listening on HOST:PORT"), for
// tests that talk to real workers over gRPC. The destructor kills it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::worker_test {

class WorkerProcess {
 public:
  // Writes a config (model_dirs = dir, name, then `link_security`: YAML of
  // the tls: block, or plaintext on loopback) and starts the worker with
  // --listen 127.0.0.1:PORT (0: any). Check ok() / error().
  WorkerProcess(const std::string& name, const std::string& model_dir,
                int port = 0, int threads = 1,
                const std::string& link_security = "insecure: true\n") {
    config_ = ::testing::TempDir() + "/" + name + "-" +
              std::to_string(::getpid()) + ".yaml";
    {
      std::ofstream out(config_);
      out << "listen: 127.0.0.1:" << port
          << "\nbackend: cpu\nthreads: " << threads
          << "\nmemory_budget: 1GiB\nmodel_dirs: [" << model_dir
          << "]\nname: " << name << "\n"
          << link_security;
    }
    int fds[2];
    if (::pipe(fds) != 0) {
      error_ = "pipe failed";
      return;
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
      const std::string bin = STRATA_WORKER_BIN;
      ::execl(bin.c_str(), bin.c_str(), "--config", config_.c_str(),
              static_cast<char*>(nullptr));
      std::perror("execl strata-worker");
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
    read_address();
  }

  ~WorkerProcess() {
    kill(SIGCONT);
    kill(SIGKILL);
    reap();
    if (out_ >= 0) ::close(out_);
    std::remove(config_.c_str());
  }

  bool ok() const { return !address_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& address() const { return address_; }
  int port() const {
    return std::stoi(address_.substr(address_.rfind(':') + 1));
  }
  void kill(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // After kill(SIGSTOP): waits until the kernel reports the process
  // stopped (state T in /proc/PID/stat; the signal is delivered
  // asynchronously), up to `timeout`. False when it never was.
  bool wait_stopped(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      if (stat_fields().rfind("T", 0) == 0) return true;  // field 3, state
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  // CPU time the process used so far (user + system), in clock ticks.
  long cpu_ticks() const {
    const std::string fields = stat_fields();
    if (fields.empty()) return -1;
    std::istringstream rest(fields);
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stol(field);
      if (i == 15) stime = std::stol(field);
    }
    return utime + stime;
  }
  // After kill(SIGKILL): waits for the process.
  void reap() {
    if (pid_ > 0) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

 private:
  void read_address() {
    std::string text;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out_, buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      const size_t at = text.find("listening on ");
      const size_t end = at == std::string::npos ? at : text.find('\n', at);
      if (end != std::string::npos) {
        address_ = text.substr(at + 13, end - at - 13);
        return;
      }
    }
    error_ = "strata-worker did not say where it listens: \"" + text + "\"";
  }

  std::string config_;
  // /proc/PID/stat from field 3 (the state) on: what follows the command
  // name, which may hold spaces, in "(...)". Empty when unreadable.
  std::string stat_fields() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) return "";
    return stat.substr(close + 2);
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string address_;
  std::string error_;
};

}  // namespace strata::worker_test

// A real pstrain cluster for integration tests: the coordinator, servers and workers started as
// processes on loopback (ports chosen by the OS), all killed when the Cluster goes away.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tests/integration/process_harness.h"

namespace pstrain::testing {

struct ClusterOptions {
  std::string job_file;          // run this job (--job) and exit when it ends
  std::string save_params;       // --save-params for the job
  std::string state_dir;          // --state-dir (default: a directory in the group's log dir)
  int servers = 2;
  int workers = 2;
  // --cluster-secret-file for every process (empty: an open cluster).
  std::string cluster_secret_file;
  std::vector<std::string> coordinator_flags, server_flags, worker_flags;
};

class Cluster {
 public:
  explicit Cluster(ClusterOptions options);

  // Waits for the coordinator to exit (the job ended); returns its exit code. Fails the test with
  // every process's log tail on timeout.
  int wait_job(std::chrono::seconds timeout);
  // The accuracy from the coordinator's "final test accuracy: X" line (-1 if none).
  double final_accuracy() const;

  ProcessGroup& group() { return group_; }
  Process& coordinator() { return *coordinator_; }
  std::vector<Process*>& servers() { return servers_; }
  std::vector<Process*>& workers() { return workers_; }
  std::vector<int>& server_ports() { return server_ports_; }
  int coordinator_port() const { return coordinator_port_; }
  int http_port() const { return http_port_; }
  const std::string& state_dir() const { return state_dir_; }
  // Stops the coordinator (SIGKILL if `hard`, else SIGTERM) and, after `down_for`, starts it again
  // with the same flags, state directory and ports; waits until it is ready.
  void restart_coordinator(bool hard, std::chrono::milliseconds down_for = std::chrono::milliseconds(0));
  // Stops server i (SIGKILL if `hard`, else SIGTERM and wait for it to exit) and, if `restart`,
  // starts it again with the same name and data directory.
  void stop_server(size_t i, bool hard);
  void start_server(size_t i);

 private:
  ProcessGroup group_;
  Process* coordinator_ = nullptr;
  std::vector<Process*> servers_, workers_;
  std::vector<int> server_ports_;
  int coordinator_port_ = 0;
  int http_port_ = 0;
  std::string state_dir_;
  std::vector<std::string> coordinator_argv_;
  std::vector<std::vector<std::string>> server_argv_;
};

// Path of a built binary, e.g. binary("server/pstrain-server").
std::string binary(const std::string& relative);

// Writes `json` to a file in `dir` and returns its path.
std::string write_spec(const std::string& dir, const std::string& name, const std::string& json);

// Reads a raw float32 file (--save-params).
std::vector<float> read_floats(const std::string& path);

}  // namespace pstrain::testing

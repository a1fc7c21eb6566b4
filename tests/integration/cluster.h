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
  int servers = 2;
  int workers = 2;
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

 private:
  ProcessGroup group_;
  Process* coordinator_ = nullptr;
  std::vector<Process*> servers_, workers_;
  std::vector<int> server_ports_;
  int coordinator_port_ = 0;
};

// Path of a built binary, e.g. binary("server/pstrain-server").
std::string binary(const std::string& relative);

// Writes `json` to a file in `dir` and returns its path.
std::string write_spec(const std::string& dir, const std::string& name, const std::string& json);

// Reads a raw float32 file (--save-params).
std::vector<float> read_floats(const std::string& path);

}  // namespace pstrain::testing

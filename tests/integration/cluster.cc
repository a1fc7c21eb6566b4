#include "tests/integration/cluster.h"

#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/test_support.h"

namespace pstrain::testing {

std::string binary(const std::string& relative) { return std::string(PSTRAIN_BINARY_DIR) + "/" + relative; }

std::string write_spec(const std::string& dir, const std::string& name, const std::string& json) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << json;
  return path;
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

Cluster::Cluster(ClusterOptions options) {
  using namespace std::chrono_literals;
  state_dir_ = options.state_dir.empty() ? group_.log_dir() + "/coordinator-state" : options.state_dir;
  // Fixed ports (picked free now) so that a restarted coordinator is found at the same address.
  const std::vector<int> ports = free_ports(2);  // distinct: one port for both fails to start
  const int rpc_port = ports[0], http_port = ports[1];
  std::vector<std::string> argv = {binary("coordinator/pstrain-coordinator"),
                                   "--listen", "127.0.0.1:" + std::to_string(rpc_port),
                                   "--http", "127.0.0.1:" + std::to_string(http_port),
                                   "--state-dir", state_dir_,
                                   "--data-dir", data_dir(),
                                   "--heartbeat-ms", "200"};
  if (!options.job_file.empty()) {
    argv.insert(argv.end(), {"--job", options.job_file, "--exit-when-done"});
  }
  if (!options.save_params.empty()) argv.insert(argv.end(), {"--save-params", options.save_params});
  std::vector<std::string> secret;
  if (!options.cluster_secret_file.empty()) secret = {"--cluster-secret-file", options.cluster_secret_file};
  argv.insert(argv.end(), secret.begin(), secret.end());
  argv.insert(argv.end(), options.coordinator_flags.begin(), options.coordinator_flags.end());
  coordinator_argv_ = argv;
  coordinator_ = &group_.start("coordinator", argv);
  coordinator_port_ = wait_ready(*coordinator_, 20s);
  http_port_ = std::stoi(coordinator_->wait_for_line(std::regex("http_port=([0-9]+)"), 20s, "the HTTP port")[1]);
  const std::string address = "127.0.0.1:" + std::to_string(coordinator_port_);
  for (int i = 0; i < options.servers; ++i) {
    std::vector<std::string> a = {binary("server/pstrain-server"), "--listen", "127.0.0.1:0", "--coordinator", address,
                                  "--name", "server-" + std::to_string(i),
                                  "--data-dir", group_.log_dir() + "/server-" + std::to_string(i) + "-data"};
    a.insert(a.end(), secret.begin(), secret.end());
    a.insert(a.end(), options.server_flags.begin(), options.server_flags.end());
    server_argv_.push_back(a);
    servers_.push_back(&group_.start("server-" + std::to_string(i), a));
  }
  for (int i = 0; i < options.servers; ++i) server_ports_.push_back(wait_ready(*servers_[static_cast<size_t>(i)], 20s));
  for (int i = 0; i < options.workers; ++i) {
    std::vector<std::string> a = {binary("worker/pstrain-worker"), "--coordinator", address, "--name",
                                  "worker-" + std::to_string(i)};
    a.insert(a.end(), secret.begin(), secret.end());
    a.insert(a.end(), options.worker_flags.begin(), options.worker_flags.end());
    workers_.push_back(&group_.start("worker-" + std::to_string(i), a));
  }
}

void Cluster::restart_coordinator(bool hard, std::chrono::milliseconds down_for) {
  using namespace std::chrono_literals;
  if (hard) {
    coordinator_->kill_hard();
  } else {
    coordinator_->terminate(5s);
  }
  std::this_thread::sleep_for(down_for);
  coordinator_ = &group_.start("coordinator", coordinator_argv_);
  wait_ready(*coordinator_, 20s);
}

void Cluster::stop_server(size_t i, bool hard) {
  using namespace std::chrono_literals;
  if (hard) {
    servers_[i]->kill_hard();
  } else {
    servers_[i]->terminate(40s);
  }
}

void Cluster::start_server(size_t i) {
  using namespace std::chrono_literals;
  servers_[i] = &group_.start("server-" + std::to_string(i), server_argv_[i]);
  server_ports_[i] = wait_ready(*servers_[i], 20s);
}

int Cluster::wait_job(std::chrono::seconds timeout) {
  const auto code = coordinator_->wait_exit(timeout);
  if (!code) FAIL("the job did not end within " << timeout.count() << " s\n" << group_.dump_logs(30));
  if (*code != 0) MESSAGE("coordinator exited with " << *code << "\n" << group_.dump_logs(30));
  return *code;
}

double Cluster::final_accuracy() const {
  std::smatch m;
  const std::string log = coordinator_->log_text();
  static const std::regex re("final test accuracy: ([0-9.]+)");
  if (!std::regex_search(log, m, re)) return -1;
  return std::stod(m[1]);
}

}  // namespace pstrain::testing

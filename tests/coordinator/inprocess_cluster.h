// A pstrain cluster inside the test process, gloo's "N ranks as threads": the coordinator, each
// parameter server and each worker runs on a thread of its own with its own KJ event loop, built
// by the binaries' own code (CoordinatorNode, run_server_node, run_worker_node) and talking over
// loopback TCP (ports chosen by the OS). Stopping a node ends its thread: its loop, sockets and
// state go away, as in a kill. A server started again under its name reopens its data directory
// (a restart); the coordinator started again reopens its state directory on the same port.
//
// Thread rules: the test's thread only (it runs an event loop of its own for the waits). Every
// wait has a deadline and fails the test (doctest FAIL) saying what it waited for, with the
// job's record and each node's state. The destructor stops and joins every thread, also when an
// assertion failed.
#pragma once

#include <kj/async-io.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/base/cross_thread.h"
#include "common/data/job_spec.h"
#include "common/rpc/rpc_util.h"
#include "coordinator/coordinator_node.h"
#include "tests/test_support.h"
#include "worker/parameter_exchange.h"

namespace pstrain::testing {

// One node on a thread of its own. `body` builds the node on the thread's event loop, calls
// `ready(port)` once it serves, and returns once `stop` has resolved (and the node has done what
// that asks).
class NodeThread {
 public:
  using Ready = std::function<void(uint32_t port)>;
  using Body = std::function<void(kj::AsyncIoContext& io, kj::Promise<rpc::NodeStop> stop, const Ready& ready)>;

  NodeThread(std::string name, Body body);
  // Asks the node to stop at once if it runs, and joins its thread (logging an error if that
  // takes more than 30 s: a destructor cannot fail the test).
  ~NodeThread();
  NodeThread(const NodeThread&) = delete;
  NodeThread& operator=(const NodeThread&) = delete;

  const std::string& name() const { return name_; }
  // Waits until the node is ready and returns its port; fails the test if the node ended first
  // or did not get ready within `timeout`.
  uint32_t wait_ready(std::chrono::milliseconds timeout);
  // Asks the node to stop (the first request counts) and returns.
  void ask_to_stop(rpc::NodeStop how);
  // Asks the node to stop and waits until its thread has ended; fails the test after `timeout`.
  void stop(rpc::NodeStop how, std::chrono::milliseconds timeout);
  // The node's event loop, to run something there (valid while the thread is ready).
  const kj::Executor& executor() const { return *executor_; }
  // "ready", "starting", "stopped" or "failed: <what the body threw>".
  std::string state() const;

 private:
  void run(const Body& body);
  void request_stop(rpc::NodeStop how);  // under mutex_

  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::shared_ptr<CrossThreadFulfiller<rpc::NodeStop>> stop_;  // guarded by mutex_
  std::optional<rpc::NodeStop> stop_requested_;                         // guarded by mutex_
  kj::Own<const kj::Executor> executor_;  // set before ready_, guarded by mutex_ until then
  bool ready_ = false, ended_ = false;   // guarded by mutex_
  uint32_t port_ = 0;                    // guarded by mutex_
  std::string error_;                    // guarded by mutex_
  std::thread thread_;                   // last: starts once the members above exist
};

// Sends what the process writes on a file descriptor (stdout unless told) to a file while it
// lives, where text() reads it, and writes it all out on that descriptor when destroyed. The
// coordinator prints each epoch's example ledger on stdout; every node logs on stderr.
class OutputCapture {
 public:
  explicit OutputCapture(std::string path, int fd = 1);
  ~OutputCapture();
  OutputCapture(const OutputCapture&) = delete;
  OutputCapture& operator=(const OutputCapture&) = delete;
  std::string text() const;  // everything written so far

 private:
  std::string path_;
  int fd_;
  int saved_ = -1;  // the original descriptor
};

// Short timeouts for every procedure of the coordinator's jobs, for a cluster of threads.
JobOptions short_job_options();

// Whether in-process servers also take a same-host socket unless a test says: yes, as
// pstrain-server does, unless PSTRAIN_SERVER_SAME_HOST_SOCKET is 0, false or no (the ctest
// entries "tcp: ..." run the recovery tests so, and pstrain-server binaries they start inherit it).
bool same_host_by_default();

// How long a node of a cluster of threads may be silent before it is declared dead. Sanitized
// builds run 2-10x slower, and two such tests in parallel on two cores can stall a process for
// more than 1.5 s (a TSan run once declared three live nodes of an uninterrupted job dead): there
// a silence counts as a death after 3 s (still under every timeout of short_job_options()). A
// killed node is noticed later; nothing else changes.
// The same for a test's call on the coordinator's thread (call_coordinator): a final_params of a
// 10 MB model under TSan took more than 5 s.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr uint32_t kInProcessDeadAfterMs = 3000;
inline constexpr auto kCoordinatorCallTimeout = 60 * kj::SECONDS;
#else
inline constexpr uint32_t kInProcessDeadAfterMs = 1500;
inline constexpr auto kCoordinatorCallTimeout = 5 * kj::SECONDS;
#endif

// The variants a test loops over that share their threads and RPCs (compression kinds through
// the same recovery, say): every one in the release build, whose run checks each variant's
// numbers; under a sanitizer the last one only. A sanitizer looks for races and bad memory,
// which the variants' shared paths already show it, and under ThreadSanitizer each variant is a
// whole cluster's run of 40-60 s (four such loops took 116-164 s each of CI's TSan stage).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
template <typename T>
std::vector<T> variants(std::initializer_list<T> all) {
  if (kSanitizedBuild && all.size() > 1) return {*(all.end() - 1)};
  return std::vector<T>(all);
}

struct InProcessOptions {
  int servers = 2;
  int workers = 2;
  uint32_t heartbeat_ms = 100;                     // how often nodes heartbeat (CoordinatorService)
  uint32_t dead_after_ms = kInProcessDeadAfterMs;  // a node silent this long is declared dead (Cluster)
  JobOptions job = short_job_options();
  SplitLoader load_split;  // the coordinator's (CoordinatorNodeConfig); empty: the data directory's
  Exchange exchange = Exchange::kForward;  // the workers' (SessionOptions)
  bool same_host = same_host_by_default();  // servers with a same-host socket too (ServerNodeConfig::same_host_socket)
};

class InProcessCluster {
 public:
  // Starts the coordinator, the servers ("server-<i>", each with its data directory) and the
  // workers ("worker-<i>"); returns once each has registered with the coordinator.
  explicit InProcessCluster(InProcessOptions options = {});
  // Stops the workers, then the servers, then the coordinator, and joins every thread.
  ~InProcessCluster();
  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  // Queues a job at the coordinator and starts it if the cluster has room; returns its id.
  std::string submit(const JobSpec& spec);
  // The job's record as the coordinator's JobStore has it now.
  JobRecord record(const std::string& id);
  // Waits until `reached(record)`; fails the test after `timeout`, or as soon as the job ends
  // without it, saying `what` it waited for.
  JobRecord wait_for(const std::string& id, const std::string& what, const std::function<bool(const JobRecord&)>& reached,
                     std::chrono::milliseconds timeout);
  // Waits until the job has ended (in any state); returns its record.
  JobRecord wait_finished(const std::string& id, std::chrono::milliseconds timeout);
  // The trained parameters of a job that succeeded (as the coordinator collected them).
  std::vector<float> final_params(const std::string& id);
  // The file of the job's checkpoint at `step`, as the coordinator's JobStore has it.
  std::optional<std::string> checkpoint_file(const std::string& id, int64_t step);

  // Stops server i's thread (NodeStop::kPreempted: after its preemption notice is answered).
  void stop_server(size_t i, rpc::NodeStop how);
  // Starts server i again under its name, on its data directory (a new port).
  void start_server(size_t i);
  void stop_worker(size_t i, rpc::NodeStop how);
  // Stops the coordinator's thread and starts a new one on the same state directory and port.
  void restart_coordinator();
  // What the process printed on stdout since the cluster started.
  std::string printed() const { return stdout_.text(); }
  // The job's record and every node's state, for failure messages.
  std::string describe(const std::string& id);

 private:
  // Runs `f(CoordinatorNode&)` on the coordinator's event loop. The promise, of the test thread's
  // loop, fails if `f` throws, if the coordinator is not running, or after kCoordinatorCallTimeout.
  template <typename F>
  auto call_coordinator(F f);
  // call_coordinator(f), waited for; fails the test saying `what` if the call fails.
  template <typename F>
  auto on_coordinator(const std::string& what, F f);
  kj::Promise<std::optional<JobRecord>> fetch_record(const std::string& id);
  [[noreturn]] void call_failed(const std::string& what, const kj::Exception& e);
  void start_coordinator(uint32_t port);
  void wait_registered(int servers, int workers);
  void pause_for(std::chrono::milliseconds duration);  // between two looks at something polled

  InProcessOptions options_;
  TempDir dir_;
  OutputCapture stdout_;
  kj::AsyncIoContext io_;  // the test thread's loop: deadlines of cross-thread calls, polling
  uint32_t coordinator_port_ = 0;
  // Set on the coordinator's thread while its node exists; read there only (on_coordinator).
  CoordinatorNode* coordinator_node_ = nullptr;
  std::unique_ptr<NodeThread> coordinator_;
  std::vector<std::unique_ptr<NodeThread>> servers_, workers_;
};

template <typename F>
auto InProcessCluster::call_coordinator(F f) {
  auto call = coordinator_->executor().executeAsync([this, f = kj::mv(f)]() mutable {
    KJ_REQUIRE(coordinator_node_ != nullptr, "the coordinator is not running");
    return f(*coordinator_node_);
  });
  return io_.provider->getTimer().timeoutAfter(kCoordinatorCallTimeout, kj::mv(call));
}

template <typename F>
auto InProcessCluster::on_coordinator(const std::string& what, F f) {
  auto call = call_coordinator(kj::mv(f));
  try {
    return call.wait(io_.waitScope);
  } catch (const kj::Exception& e) {
    call_failed(what, e);
  }
}

}  // namespace pstrain::testing

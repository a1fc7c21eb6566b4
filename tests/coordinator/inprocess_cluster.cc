#include "tests/coordinator/inprocess_cluster.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <kj/common.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "common/engine/compute_threads.h"
#include "common/base/log.h"
#include "server/server_node.h"
#include "worker/worker_node.h"

namespace pstrain::testing {

using namespace std::chrono_literals;

// ---- NodeThread ---------------------------------------------------------------------------

NodeThread::NodeThread(std::string name, Body body) : name_(std::move(name)) {
  thread_ = std::thread([this, body = std::move(body)] { run(body); });
}

NodeThread::~NodeThread() {
  ask_to_stop(rpc::NodeStop::kNow);
  // A destructor cannot fail the test: it says what it waits for, and waits on.
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, 30s, [this] { return ended_; })) {
    PSLOG(kError) << "node " << name_ << " has not stopped 30 s after it was asked to; still waiting";
  }
  lock.unlock();
  thread_.join();
}

void NodeThread::ask_to_stop(rpc::NodeStop how) {
  std::lock_guard lock(mutex_);
  request_stop(how);
}

void NodeThread::run(const Body& body) {
  std::string error;
  try {
    auto io = kj::setupAsyncIo();
    auto stop = make_cross_thread_paf<rpc::NodeStop>();
    // Before the loop (and its wake-up descriptor) goes: a later request_stop() must not wake
    // it (ThreadSanitizer caught that write racing the close, a write to a descriptor that may
    // be reused by then).
    KJ_DEFER({
      std::lock_guard lock(mutex_);
      stop_ = nullptr;
    });
    {
      std::lock_guard lock(mutex_);
      stop_ = stop.fulfiller;
      executor_ = kj::getCurrentThreadExecutor().addRef();
      if (stop_requested_) stop_->fulfill(kj::cp(*stop_requested_));
    }
    // One math thread per node, as the binaries run: OpenMP's thread count is each thread's own
    // setting, so the constructor's call does not reach this thread (left at one per core,
    // OpenBLAS ran products on libgomp threads, whose hand-offs ThreadSanitizer cannot see).
    set_compute_threads(1);
    body(io, kj::mv(stop.promise), [this](uint32_t port) {
      std::lock_guard lock(mutex_);
      ready_ = true;
      port_ = port;
      changed_.notify_all();
    });
  } catch (const kj::Exception& e) {
    error = e.getDescription().cStr();
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::lock_guard lock(mutex_);
  error_ = error;
  ended_ = true;
  changed_.notify_all();
}

void NodeThread::request_stop(rpc::NodeStop how) {
  if (stop_requested_) return;
  stop_requested_ = how;
  if (stop_) stop_->fulfill(kj::cp(how));
}

uint32_t NodeThread::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, timeout, [this] { return ready_ || ended_; })) {
    FAIL("node " << name_ << " was not ready within " << timeout.count() << " ms");
  }
  if (!ready_) FAIL("node " << name_ << " ended before it was ready: " << error_);
  return port_;
}

void NodeThread::stop(rpc::NodeStop how, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  request_stop(how);
  if (!changed_.wait_for(lock, timeout, [this] { return ended_; })) {
    FAIL("node " << name_ << " did not stop within " << timeout.count() << " ms");
  }
}

std::string NodeThread::state() const {
  std::lock_guard lock(mutex_);
  if (!error_.empty()) return "failed: " + error_;
  return ended_ ? "stopped" : ready_ ? "ready" : "starting";
}

// ---- OutputCapture ------------------------------------------------------------------------

OutputCapture::OutputCapture(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
  std::cout.flush();
  std::fflush(stdout);
  saved_ = ::dup(fd_);
  const int file = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  if (saved_ < 0 || file < 0 || ::dup2(file, fd_) < 0) throw std::runtime_error("cannot capture output in " + path_);
  ::close(file);
}

OutputCapture::~OutputCapture() {
  const std::string captured = text();
  ::dup2(saved_, fd_);
  ::close(saved_);
  for (size_t at = 0; at < captured.size();) {
    const ssize_t n = ::write(fd_, captured.data() + at, captured.size() - at);
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
}

std::string OutputCapture::text() const {
  std::cout.flush();
  std::fflush(stdout);
  std::ifstream in(path_, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---- InProcessCluster ---------------------------------------------------------------------

bool same_host_by_default() {
  const char* v = std::getenv("PSTRAIN_SERVER_SAME_HOST_SOCKET");
  const std::string value = v == nullptr ? "" : v;
  return !(value == "0" || value == "false" || value == "no");
}

JobOptions short_job_options() {
  JobOptions o;
  o.server_call_timeout = 10 * kj::SECONDS;
  o.server_probe_timeout = 1 * kj::SECONDS;
  o.server_return_timeout = 30 * kj::SECONDS;
  o.move_lost_server_after = 300 * kj::MILLISECONDS;
  o.server_move_timeout = 10 * kj::SECONDS;
  o.takeover_timeout = 10 * kj::SECONDS;
  o.sync_cut_timeout = 10 * kj::SECONDS;
  o.async_cut_timeout = 5 * kj::SECONDS;
  o.recovery_poll = 20 * kj::MILLISECONDS;
  return o;
}

InProcessCluster::InProcessCluster(InProcessOptions options)
    : options_(std::move(options)), stdout_(dir_.file("stdout.txt")), io_(kj::setupAsyncIo()) {
  // What the binaries do at start-up (rpc::prepare_node_process) that matters in one process: a
  // peer that vanishes must not kill us with SIGPIPE, and the math runs on one thread per node.
  std::signal(SIGPIPE, SIG_IGN);
  set_compute_threads(1);
  start_coordinator(0);
  for (size_t i = 0; i < static_cast<size_t>(options_.servers); ++i) start_server(i);
  for (int i = 0; i < options_.workers; ++i) {
    rpc::HostPort coordinator{"127.0.0.1", coordinator_port_};
    WorkerNodeConfig config{coordinator, "worker-" + std::to_string(i), SessionOptions{1, options_.exchange}};
    workers_.push_back(std::make_unique<NodeThread>(
        config.name, [config](kj::AsyncIoContext& io, kj::Promise<rpc::NodeStop> stop, const NodeThread::Ready& ready) {
          run_worker_node(io, config, kj::mv(stop), ready);
        }));
    workers_.back()->wait_ready(20s);  // registered
  }
  wait_registered(options_.servers, options_.workers);
}

InProcessCluster::~InProcessCluster() {
  // Every node is asked at once; then the threads are joined (workers, servers, coordinator).
  for (auto* group : {&workers_, &servers_}) {
    for (auto& node : *group) {
      if (node) node->ask_to_stop(rpc::NodeStop::kNow);
    }
  }
  if (coordinator_) coordinator_->ask_to_stop(rpc::NodeStop::kNow);
  workers_.clear();
  servers_.clear();
  coordinator_.reset();
}

void InProcessCluster::start_coordinator(uint32_t port) {
  CoordinatorNodeConfig config;
  config.listen = {"127.0.0.1", port};
  config.data_dir = data_dir();
  config.load_split = options_.load_split;
  config.state_dir = dir_.file("coordinator-state");
  config.heartbeat_ms = options_.heartbeat_ms;
  config.dead_after_ms = options_.dead_after_ms;
  config.job = options_.job;
  config.housekeeping_every = 50 * kj::MILLISECONDS;
  coordinator_ = std::make_unique<NodeThread>(
      "coordinator", [this, config](kj::AsyncIoContext& io, kj::Promise<rpc::NodeStop> stop, const NodeThread::Ready& ready) {
        CoordinatorNode node(io, config);
        coordinator_node_ = &node;
        KJ_DEFER(coordinator_node_ = nullptr);
        ready(node.port());
        stop.wait(io.waitScope);
      });
  coordinator_port_ = coordinator_->wait_ready(20s);
}

void InProcessCluster::start_server(size_t i) {
  ServerNodeConfig config;
  config.listen = {"127.0.0.1", 0};
  config.advertise_host = "127.0.0.1";
  config.coordinator = {"127.0.0.1", coordinator_port_};
  config.name = "server-" + std::to_string(i);
  config.data_dir = dir_.file(config.name + "-data");
  config.same_host_socket = options_.same_host;
  if (servers_.size() <= i) servers_.resize(i + 1);
  servers_[i] = std::make_unique<NodeThread>(
      config.name, [config](kj::AsyncIoContext& io, kj::Promise<rpc::NodeStop> stop, const NodeThread::Ready& ready) {
        run_server_node(io, config, kj::mv(stop), ready);
      });
  servers_[i]->wait_ready(20s);  // listening; it registers from then on
}

void InProcessCluster::stop_server(size_t i, rpc::NodeStop how) { servers_.at(i)->stop(how, 30s); }

void InProcessCluster::stop_worker(size_t i, rpc::NodeStop how) { workers_.at(i)->stop(how, 30s); }

void InProcessCluster::restart_coordinator() {
  coordinator_->stop(rpc::NodeStop::kNow, 20s);
  coordinator_.reset();
  start_coordinator(coordinator_port_);
}

void InProcessCluster::wait_registered(int servers, int workers) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    const auto [s, w] = on_coordinator("counting the registered nodes", [](CoordinatorNode& node) {
      std::pair<int, int> alive{0, 0};
      for (const auto& [id, n] : node.cluster().nodes()) {
        if (n.alive) ++(n.role == proto::Role::SERVER ? alive.first : alive.second);
      }
      return alive;
    });
    if (s >= servers && w >= workers) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      FAIL("waited 20 s for " << servers << " server(s) and " << workers << " worker(s) to register; " << s << " and "
                              << w << " did\n" << describe(""));
    }
    pause_for(10ms);
  }
}

std::string InProcessCluster::submit(const JobSpec& spec) {
  return on_coordinator("submitting the job", [spec](CoordinatorNode& node) {
    std::string id = node.jobs().submit(spec);
    node.schedule();
    return id;
  });
}

kj::Promise<std::optional<JobRecord>> InProcessCluster::fetch_record(const std::string& id) {
  return call_coordinator([id](CoordinatorNode& node) { return node.store().get(id); });
}

JobRecord InProcessCluster::record(const std::string& id) {
  std::optional<JobRecord> record;
  try {
    record = fetch_record(id).wait(io_.waitScope);
  } catch (const kj::Exception& e) {
    call_failed("reading the record of job " + id, e);
  }
  if (!record) FAIL("the coordinator has no job " << id);
  return *record;
}

JobRecord InProcessCluster::wait_for(const std::string& id, const std::string& what,
                                     const std::function<bool(const JobRecord&)>& reached,
                                     std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    JobRecord r = record(id);
    if (reached(r)) return r;
    if (r.finished()) FAIL("job " << id << " ended before " << what << "\n" << describe(id));
    if (std::chrono::steady_clock::now() >= deadline) {
      FAIL("waited " << timeout.count() << " ms for " << what << "\n" << describe(id));
    }
    pause_for(10ms);
  }
}

JobRecord InProcessCluster::wait_finished(const std::string& id, std::chrono::milliseconds timeout) {
  return wait_for(id, "job " + id + " to end", [](const JobRecord& r) { return r.finished(); }, timeout);
}

std::vector<float> InProcessCluster::final_params(const std::string& id) {
  return on_coordinator("collecting the trained parameters", [id](CoordinatorNode& node) {
    JobRunner* job = node.jobs().find(id);
    KJ_REQUIRE(job != nullptr && job->state() == JobState::kSucceeded, "the job has not succeeded", id.c_str());
    return job->final_params();
  });
}

std::optional<std::string> InProcessCluster::checkpoint_file(const std::string& id, int64_t step) {
  return on_coordinator("reading a checkpoint", [id, step](CoordinatorNode& node) {
    return node.store().checkpoint_file(id, step);
  });
}

std::string InProcessCluster::describe(const std::string& id) {
  std::ostringstream out;
  if (!id.empty()) {
    std::optional<JobRecord> r;
    try {
      r = fetch_record(id).wait(io_.waitScope);
    } catch (const kj::Exception& e) {
      out << "job " << id << ": no record (" << e.getDescription().cStr() << ")\n";
    }
    if (r) {
      out << "job " << id << ": " << job_state_name(r->state) << (r->reason.empty() ? "" : " (" + r->reason + ")")
          << ", step " << r->steps_done << " of " << r->total_steps << ", last complete backup "
          << (r->last_backup_step ? std::to_string(*r->last_backup_step) : "none") << ", " << r->recoveries
          << " recoveries\n";
      for (const auto& note : r->notes) out << "  note: " << note << "\n";
    }
  }
  out << "nodes: coordinator " << (coordinator_ ? coordinator_->state() : "absent");
  for (const auto* group : {&servers_, &workers_}) {
    for (const auto& node : *group) out << ", " << node->name() << " " << node->state();
  }
  return out.str();
}

void InProcessCluster::call_failed(const std::string& what, const kj::Exception& e) {
  FAIL(what << " failed on the coordinator's thread: " << e.getDescription().cStr() << "\n" << describe(""));
  std::abort();  // FAIL throws; this only tells the compiler
}

void InProcessCluster::pause_for(std::chrono::milliseconds duration) {
  io_.provider->getTimer().afterDelay(duration.count() * kj::MILLISECONDS).wait(io_.waitScope);
}

}  // namespace pstrain::testing

// pstrain-exchange-bench: gradient-exchange throughput against one running pstrain-server.
//
// It starts nothing itself. Given --server host:port of a running server (for a bench, start one
// by hand: `pstrain-server --listen 127.0.0.1:0 --coordinator 127.0.0.1:1`; it keeps retrying the
// coordinator in the background but serves RPC anyway), it configures a job of its own on that
// server — the job spec (--spec, the MNIST MLP by default) with one server and --clients workers,
// in --mode sync (the default and the product's main path: the clients are the slices of each
// step, replies zero-copy) or async (every push applied and answered at once) — and then, on
// each of --clients connections (one thread and event loop each), runs steps the way a worker
// does: push every chunk at once (a zero gradient, sent zero-copy with reference_tensor; chunks
// under 256 KB together in one pushBatch unless --batched=false), wait for every reply and copy
// its values out. After --warmup-steps untimed steps per client, it runs
// for --seconds and reports the bytes pushed + pulled per second (GB/s = 1e9 bytes/s), steps/s and
// the mean step time, then the server's own counters, and a `RESULT {json}` line for scripts.
// Finally it drops its job from the server.
//
// The figure includes the server's update (Adam on every parameter, single-threaded) and the
// client's copy of the values: it is the exchange a worker's step waits for, without compute.
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/engine/compute_threads.h"
#include "common/base/error.h"
#include "common/base/flags.h"
#include "common/rpc/message_limits.h"
#include "common/base/process_main.h"
#include "common/data/job_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/param_layout.h"
#include "common/rpc/rpc_util.h"
#include "tests/rpc_support.h"

#ifndef PSTRAIN_EXCHANGE_BENCH_DEFAULT_SPEC
#define PSTRAIN_EXCHANGE_BENCH_DEFAULT_SPEC "deploy/jobs/mnist-mlp.json"
#endif

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  rpc::HostPort server;
  std::string spec_path;
  double seconds = 5;
  int clients = 1;
  int warmup_steps = 5;
  std::string mode = "sync";
  // As a worker sends them: chunks under rpc::kBatchedPushBytes in one pushBatch, the rest alone.
  // Off: one push per chunk (the protocol before pushBatch).
  bool batched = true;
  // With a secret: every connection proves it, and the job has a worker key (each client sends
  // its worker token with every push), as in a cluster with a credential.
  rpc::ClusterCredential cluster;
  std::string worker_key;
};

struct ClientResult {
  uint64_t steps = 0;
  double seconds = 0;
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  std::string error;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read the job spec " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// One client: its own event loop and connection; `start` lines the clients up after warm-up so
// that their timed windows overlap.
void run_client(const Options& options, const std::string& job_id, const std::vector<ChunkInfo>& chunks,
                const std::vector<size_t>& chunk_offsets, size_t total_floats, uint32_t index,
                std::barrier<>& start, std::atomic<uint64_t>& stop_at, ClientResult& out) {
  bool arrived = false;
  try {
    auto io = kj::setupAsyncIo();
    auto& ws = io.waitScope;
    auto connection = rpc::connect(*io.provider, options.server, options.cluster).wait(ws);
    auto server = connection->bootstrap().castAs<proto::ParameterServer>();
    rpc::WorkerPass pass{index + 1, ""};
    if (!options.worker_key.empty()) pass.token = rpc::worker_token(options.worker_key, pass.node);
    // The layout keeps every tensor (and so every chunk) word-aligned inside the flat buffer;
    // std::vector's allocation is at least 16-byte aligned.
    std::vector<float> grads(total_floats, 0.0f), params(total_floats, 0.0f);
    std::vector<uint64_t> versions(chunks.size(), 0);
    const uint32_t clients = static_cast<uint32_t>(options.clients);
    uint64_t step_bytes = 0;
    for (const ChunkInfo& c : chunks) step_bytes += c.size * sizeof(float);

    uint64_t step = 0;
    auto fill = [&](proto::ParameterServer::PushParams::Builder request, size_t k) {
      request.setJobId(job_id);
      request.setKey(chunks[k].key);
      request.setStep(step);
      request.setSlice(index);
      request.setSliceCount(clients);
      request.setWorker(index);
      request.setExamples(64);
      request.setBaseVersion(versions[k]);
      pass.set_on(request);
      rpc::reference_tensor(request.getGradient().initDense(), {grads.data() + chunk_offsets[k], chunks[k].size});
    };
    auto take = [&](size_t k, proto::ParameterServer::PushResults::Reader r) {
      const auto values = rpc::tensor_view(r.getValues().getWhole(), chunks[k].size, "updated values");
      std::memcpy(params.data() + chunk_offsets[k], values.data(), values.size_bytes());
      versions[k] = r.getVersion();
    };
    std::vector<size_t> alone, together;
    for (size_t k = 0; k < chunks.size(); ++k) {
      const bool small = chunks[k].size * sizeof(float) < rpc::kBatchedPushBytes;
      (options.batched && small ? together : alone).push_back(k);
    }
    if (together.size() == 1) alone.push_back(together[0]), together.clear();
    auto one_step = [&] {
      kj::Vector<kj::Promise<void>> replies;
      for (size_t k : alone) {
        auto request = server.pushRequest();
        fill(request, k);
        replies.add(request.send().then(
            [&, k](capnp::Response<proto::ParameterServer::PushResults>&& r) { take(k, r); }));
      }
      for (size_t first = 0; first < together.size(); first += rpc::kMaxBatchedPushes) {
        const size_t n = std::min(together.size() - first, rpc::kMaxBatchedPushes);
        auto request = server.pushBatchRequest();
        auto entries = request.initPushes(static_cast<unsigned>(n));
        for (size_t i = 0; i < n; ++i) fill(entries[static_cast<unsigned>(i)], together[first + i]);
        replies.add(request.send().then([&, first, n](capnp::Response<proto::ParameterServer::PushBatchResults>&& r) {
          const auto results = r.getResults();
          KJ_REQUIRE(results.size() == n, "batch reply has the wrong number of results");
          for (size_t i = 0; i < n; ++i) take(together[first + i], results[static_cast<unsigned>(i)]);
        }));
      }
      kj::joinPromises(replies.releaseAsArray()).wait(ws);
      ++step;
    };

    for (int i = 0; i < options.warmup_steps; ++i) one_step();
    arrived = true;
    start.arrive_and_wait();
    const auto t0 = Clock::now();
    const auto deadline = t0 + std::chrono::duration<double>(options.seconds);
    // In sync mode every client must run the same steps (a step needs all of them): the first to
    // see the deadline fixes the last step for all, one past its own. Clients are never more than
    // one step apart, and another client may already have started the step after the one this
    // client completed (it read stop_at before it was lowered): stopping right here would leave
    // that client waiting for this one's push forever.
    uint64_t timed = 0;
    while (timed < stop_at.load()) {
      one_step();
      ++timed;
      if (Clock::now() >= deadline) {
        uint64_t current = stop_at.load();
        while (timed + 1 < current && !stop_at.compare_exchange_weak(current, timed + 1)) {
        }
      }
    }
    out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    out.steps = timed;
    out.bytes_pushed = timed * step_bytes;
    out.bytes_pulled = timed * step_bytes;
  } catch (const kj::Exception& e) {
    out.error = e.getDescription().cStr();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  if (!arrived) start.arrive_and_drop();
}

int run(const Options& options) {
  // The job: the given spec on one server. In sync mode (the default, the product's main path) the
  // clients are the step's slices and the replies carry the values without copying them; in
  // async mode each push is applied and answered at once, with the values copied into the reply.
  JobSpec spec = parse_job_spec(read_file(options.spec_path));
  spec.training.mode = options.mode == "async" ? TrainingMode::kAsync : TrainingMode::kSync;
  spec.training.servers = 1;
  spec.training.workers = options.clients;
  spec.training.max_staleness = -1;
  spec.training.backup_workers = 0;
  spec.backup = BackupSpec{};  // exchange only: no backups
  const std::string spec_json = job_spec_to_json(spec);
  const ParamLayout layout = make_param_layout(spec.model);
  const std::vector<ChunkInfo> chunks = plan_chunks(layout, 1);
  std::vector<size_t> chunk_offsets;
  uint64_t step_bytes = 0;
  for (const ChunkInfo& c : chunks) {
    chunk_offsets.push_back(layout.params()[c.param].offset + c.offset);
    step_bytes += c.size * sizeof(float);
  }
  const std::string job_id = "exchange-bench-" + std::to_string(getpid());

  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  const auto connect_start = Clock::now();
  auto connection = rpc::connect(*io.provider, options.server, options.cluster).wait(ws);
  const double connect_ms = std::chrono::duration<double, std::milli>(Clock::now() - connect_start).count();
  auto server = connection->bootstrap().castAs<proto::ParameterServer>();
  testing::configure_job(server, ws, job_id, spec_json, chunks, static_cast<uint32_t>(options.clients),
                         options.worker_key);
  std::printf("exchange-bench: server %s, job %s: %zu parameters in %zu chunks (%.3f MB per direction per step), "
              "%d client(s), %d warm-up steps, %.1f s, %s, %s\n",
              options.server.str().c_str(), job_id.c_str(), layout.total_size(), chunks.size(), step_bytes / 1e6,
              options.clients, options.warmup_steps, options.seconds,
              options.cluster.open() ? "open (no credential)" : "cluster secret + worker tokens",
              options.batched ? "small chunks batched (pushBatch)" : "one push per chunk");
  std::printf("connected in %.3f ms (TCP connect%s)\n", connect_ms, options.cluster.open() ? "" : " + handshake");
  std::fflush(stdout);

  std::vector<ClientResult> results(static_cast<size_t>(options.clients));
  {
    std::barrier<> start(options.clients);
    std::atomic<uint64_t> stop_at{UINT64_MAX};
    std::vector<std::thread> threads;
    for (int i = 0; i < options.clients; ++i) {
      threads.emplace_back(run_client, std::cref(options), std::cref(job_id), std::cref(chunks),
                           std::cref(chunk_offsets), layout.total_size(), static_cast<uint32_t>(i), std::ref(start),
                           std::ref(stop_at), std::ref(results[static_cast<size_t>(i)]));
    }
    for (auto& t : threads) t.join();
  }

  // The server's view, then clean up.
  uint64_t applied = 0, bytes_in = 0, bytes_out = 0;
  {
    auto request = server.statsRequest();
    request.setJobId(job_id);
    auto stats = request.send().wait(ws).getStats();
    applied = stats.getPushesApplied();
    bytes_in = stats.getBytesIn();
    bytes_out = stats.getBytesOut();
  }
  {
    auto request = server.dropJobRequest();
    request.setJobId(job_id);
    request.send().wait(ws);
  }

  int status = 0;
  uint64_t steps = 0, pushed = 0, pulled = 0;
  double seconds = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const ClientResult& r = results[i];
    if (!r.error.empty()) {
      std::fprintf(stderr, "exchange-bench: client %zu failed: %s\n", i, r.error.c_str());
      status = 1;
      continue;
    }
    std::printf("client %zu: %llu steps in %.2f s: %.1f steps/s, %.3f ms/step, %.3f GB/s pushed+pulled\n", i,
                static_cast<unsigned long long>(r.steps), r.seconds, r.steps / r.seconds, 1e3 * r.seconds / r.steps,
                (r.bytes_pushed + r.bytes_pulled) / r.seconds / 1e9);
    steps += r.steps;
    pushed += r.bytes_pushed;
    pulled += r.bytes_pulled;
    seconds = std::max(seconds, r.seconds);
  }
  if (status != 0 || steps == 0) return 1;
  const double gbps = (pushed + pulled) / seconds / 1e9;
  std::printf("total: %.1f steps/s, %.3f GB/s pushed+pulled (%.3f GB/s each way); server counted %llu pushes applied, "
              "%.1f MB in, %.1f MB out (incl. warm-up)\n",
              steps / seconds, gbps, pushed / seconds / 1e9, static_cast<unsigned long long>(applied), bytes_in / 1e6,
              bytes_out / 1e6);
  std::printf("RESULT {\"clients\": %d, \"seconds\": %.3f, \"steps\": %llu, \"steps_per_second\": %.2f, "
              "\"ms_per_step\": %.4f, \"bytes_per_step_each_way\": %llu, \"chunks\": %zu, \"gb_per_second\": %.4f, "
              "\"server_pushes_applied\": %llu, \"connect_ms\": %.3f, \"credential\": %s}\n",
              options.clients, seconds, static_cast<unsigned long long>(steps), steps / seconds,
              1e3 * seconds * options.clients / steps, static_cast<unsigned long long>(step_bytes), chunks.size(), gbps,
              static_cast<unsigned long long>(applied), connect_ms, options.cluster.open() ? "false" : "true");
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-exchange-bench",
                "Gradient-exchange throughput against a running pstrain-server: pushes every chunk of the\n"
                "job's parameters (zero gradients, async job) and waits for the values, for --seconds.");
  flags.add("server", "", "", "host:port of a running pstrain-server (required).");
  flags.add("spec", "", PSTRAIN_EXCHANGE_BENCH_DEFAULT_SPEC, "Job spec whose model sets the parameters exchanged.");
  flags.add("seconds", "", "5", "Timed duration.");
  flags.add("clients", "", "1", "Concurrent connections (one thread each), as that many workers.");
  flags.add("warmup-steps", "", "5", "Untimed steps per client first.");
  flags.add("mode", "", "sync", "sync (clients are one step's slices; zero-copy replies) or async.");
  flags.add("batched", "", "true",
            "true: chunks under 256 KB go in one pushBatch per step, as a worker sends them; false: one push per chunk.");
  flags.add(rpc::kSecretFlag, rpc::kSecretEnv, "", rpc::kSecretHelp);
  if (const auto status = parse_flags(flags, argc, argv, "pstrain-exchange-bench")) return *status;
  // As every node process does (rpc::prepare_node_process): freed message buffers stay in the
  // heap, so a client pays for its replies what a worker pays, not a page fault per page.
  keep_freed_memory();
  Options options;
  try {
    if (flags.get("server").empty()) throw Error("--server host:port is required");
    options.server = rpc::parse_host_port(flags.get("server"), 7100, "--server");
    options.spec_path = flags.get("spec");
    options.seconds = flags.get_double("seconds", 0.1, 3600);
    options.clients = static_cast<int>(flags.get_int("clients", 1, 64));
    options.mode = flags.get("mode");
    if (flags.get("batched") != "true" && flags.get("batched") != "false") throw Error("--batched must be true or false");
    options.batched = flags.get("batched") == "true";
    if (options.mode != "sync" && options.mode != "async") throw pstrain::Error("--mode must be sync or async");
    options.warmup_steps = static_cast<int>(flags.get_int("warmup-steps", 0, 1000000));
    options.cluster = rpc::ClusterCredential::from_flag(flags.get(rpc::kSecretFlag));
    if (!options.cluster.open()) options.worker_key = rpc::random_key();
  } catch (const std::exception& e) {
    std::cerr << "pstrain-exchange-bench: " << e.what() << "\n";
    return 2;
  }
  try {
    return run(options);
  } catch (const kj::Exception& e) {
    std::cerr << "pstrain-exchange-bench: " << e.getDescription().cStr() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "pstrain-exchange-bench: " << e.what() << "\n";
  }
  return 1;
}

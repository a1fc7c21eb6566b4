// Fuzz target: the parameter server's request validation (server/parameter_server.h). The checks
// live in the RPC methods of ParameterServerImpl, so the target calls them as the tests do: on a
// local capability (no sockets), on an event loop of its own, with arbitrary Cap'n Proto messages
// as the calls' parameters. Each input gets a fresh server with one configured job ("job-1": a
// dense layer [4] -> 3, two chunks), sync with 2 workers or async.
//
// Input: a mode byte (bit 0: sync or async), then up to 6 calls, each [method byte][length u16,
// little-endian][a flat Cap'n Proto message of that length]. The message is read with tight
// ReaderOptions (64 Ki words, nesting 16) and its root copied into a typeless request for method
// (byte % 17) of ParameterServer: any struct, any pointers. An exception is the expected answer to
// a bad call (the server fails that call only); a call that waits (a sync push for the other
// slice) is polled and dropped at the end. ASan/UBSan and the server's own state checks are the
// oracle; the server must also still answer a well-formed stats call afterwards.
//
// With PSTRAIN_FUZZ_WRITE_SEEDS=<dir> in the environment, the target writes its seed inputs
// (well-formed calls of every kind) into <dir> and exits: how fuzz/corpus/param_server/ was made.
#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/async.h>
#include <kj/debug.h>
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/data/job_spec.h"
#include "common/base/log.h"
#include "common/engine/model_spec.h"
#include "common/rpc/rpc_util.h"
#include "server/parameter_server.h"

using pstrain::proto::ParameterServer;

namespace {

constexpr unsigned kMethods = 17;  // ParameterServer's methods, @0..@16

std::string make_job_spec_json(bool sync) {
  return pstrain::job_spec_to_json(pstrain::parse_accepted_job_spec(
      std::string(R"({"name": "fuzz", "dataset": {"name": "fuzz"},
      "model": {"input_shape": [4], "layers": [{"type": "dense", "units": 3}]},
      "optimizer": {"type": "adam"},
      "training": {"global_batch_size": 4, "epochs": 1, "mode": ")") +
      (sync ? "sync" : "async") + R"("}})"));
}

const std::string& job_spec_json(bool sync) {
  static const std::string sync_spec = make_job_spec_json(true), async_spec = make_job_spec_json(false);
  return sync ? sync_spec : async_spec;
}

const std::vector<pstrain::ChunkInfo>& chunks() {
  static const std::vector<pstrain::ChunkInfo> c =
      pstrain::plan_chunks(pstrain::make_param_layout(pstrain::parse_accepted_job_spec(job_spec_json(true)).model), 1);
  return c;
}

struct Loop {
  kj::EventLoop loop;
  kj::WaitScope ws{loop};
};

Loop& loop() {
  static Loop* l = new Loop;  // lives as long as the process; libFuzzer calls on one thread
  return *l;
}

void configure(ParameterServer::Client& server, bool sync) {
  auto request = server.configureRequest();
  auto config = request.initConfig();
  config.setJobId("job-1");
  config.setSpecJson(job_spec_json(sync));
  pstrain::rpc::set_chunks(config.initChunks(static_cast<unsigned>(chunks().size())), chunks());
  config.setServerIndex(0);
  config.setWorkers(2);
  request.send().wait(loop().ws);
}

// ---- Seeds

template <typename Params>
std::string message_of(const std::function<void(typename Params::Builder)>& fill) {
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<Params>());
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

std::string call(unsigned method, const std::string& message) {
  std::string out(1, static_cast<char>(method));
  out += static_cast<char>(message.size() & 0xff);
  out += static_cast<char>(message.size() >> 8);
  return out + message;
}

void fill_dense_push(ParameterServer::PushParams::Builder p, uint32_t key, uint32_t slice, uint64_t step) {
  p.setJobId("job-1");
  p.setKey(key);
  p.setStep(step);
  p.setSlice(slice);
  p.setSliceCount(2);
  p.setWorker(slice);
  p.setExamples(2);
  const std::vector<float> g(chunks()[key].size, 0.5f);
  pstrain::rpc::set_tensor(p.getGradient().initDense(), g);
}

std::string dense_push(uint32_t key, uint32_t slice, uint64_t step) {
  return call(2, message_of<ParameterServer::PushParams>(
                     [&](ParameterServer::PushParams::Builder p) { fill_dense_push(p, key, slice, step); }));
}

// Chunk `key`'s push of `slice` at `step` in a compressed encoding (training.compression):
// half, bfloat16 (0.5 in either: 0x3800, 0x3f00), topk (its first and last value) or lowRank
// (columns 1, rank 1: P all 0.5, Q 1).
enum class Encoding { kHalf, kBfloat16, kTopk, kLowRank };
std::string compressed_push(Encoding encoding, uint32_t key, uint32_t slice, uint64_t step) {
  return call(2, message_of<ParameterServer::PushParams>([&](ParameterServer::PushParams::Builder p) {
    fill_dense_push(p, key, slice, step);
    const size_t n = chunks()[key].size;
    auto gradient = p.getGradient();
    switch (encoding) {
      case Encoding::kHalf:
      case Encoding::kBfloat16: {
        const uint16_t bits = encoding == Encoding::kHalf ? 0x3800 : 0x3f00;
        auto out = encoding == Encoding::kHalf ? gradient.initHalf(static_cast<unsigned>(2 * n))
                                               : gradient.initBfloat16(static_cast<unsigned>(2 * n));
        for (size_t i = 0; i < n; ++i) std::memcpy(out.begin() + 2 * i, &bits, 2);
        break;
      }
      case Encoding::kTopk: {
        auto topk = gradient.initTopk();
        auto indices = topk.initIndices(2);
        indices.set(0, 0);
        indices.set(1, static_cast<uint32_t>(n - 1));
        const float values[2] = {0.5f, -0.25f};
        topk.setValues(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(values), sizeof values));
        break;
      }
      case Encoding::kLowRank: {
        auto low_rank = gradient.initLowRank();
        low_rank.setColumns(1);
        low_rank.setRank(1);
        const std::vector<float> pf(n, 0.5f);
        const float q = 1.0f;
        low_rank.setP(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(pf.data()), n * sizeof(float)));
        low_rank.setQ(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(&q), sizeof q));
        break;
      }
    }
  }));
}

// Slice `slice`'s pushes of step `step` on every chunk, in one pushBatch.
std::string batched_pushes(uint32_t slice, uint64_t step) {
  return call(16, message_of<ParameterServer::PushBatchParams>([&](ParameterServer::PushBatchParams::Builder p) {
    auto entries = p.initPushes(static_cast<unsigned>(chunks().size()));
    for (unsigned i = 0; i < entries.size(); ++i) fill_dense_push(entries[i], chunks()[i].key, slice, step);
  }));
}

template <typename Params>
std::string job_call(unsigned method, uint64_t version = 0) {
  return call(method, message_of<Params>([&](typename Params::Builder p) {
    p.setJobId("job-1");
    if constexpr (requires { p.setVersion(version); }) p.setVersion(version);
  }));
}

void write_seeds(const std::string& dir) {
  std::vector<std::string> seeds;
  const std::string sync(1, '\1'), async(1, '\0');
  const std::string pull = call(1, message_of<ParameterServer::PullParams>([](ParameterServer::PullParams::Builder p) {
    p.setJobId("job-1");
    p.setKey(0);
  }));
  seeds.push_back(sync + pull);
  seeds.push_back(async + dense_push(0, 0, 0) + pull);
  seeds.push_back(sync + dense_push(0, 0, 0) + dense_push(0, 1, 0) + pull);
  seeds.push_back(sync + dense_push(1, 0, 0) + dense_push(1, 1, 0) + job_call<ParameterServer::VersionsParams>(14));
  seeds.push_back(async + call(2, message_of<ParameterServer::PushParams>([](ParameterServer::PushParams::Builder p) {
                    p.setJobId("job-1");
                    p.setKey(0);
                    p.setExamples(1);
                    auto sparse = p.getGradient().initSparse();
                    auto ranges = sparse.initRanges(1);
                    ranges[0].setOffset(3);
                    ranges[0].setSize(2);
                    const float part[2] = {1.0f, -1.0f};
                    sparse.initParts(1).set(0, capnp::Data::Reader(reinterpret_cast<const uint8_t*>(part), sizeof part));
                  })));
  seeds.push_back(async + call(13, message_of<ParameterServer::PushFactorsParams>(
                                       [](ParameterServer::PushFactorsParams::Builder p) {
                                         p.setJobId("job-1");
                                         p.initKeys(1).set(0, 0);
                                         p.setExamples(1);
                                         p.initBaseVersions(1).set(0, 0);
                                         const float delta[3] = {0.1f, 0.2f, 0.3f};
                                         p.setDelta(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(delta), sizeof delta));
                                         p.initRows(1).set(0, 2);
                                         const float input[1] = {1.5f};
                                         p.setInputs(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(input), sizeof input));
                                       })));
  seeds.push_back(sync + batched_pushes(0, 0) + dense_push(0, 1, 0) + dense_push(1, 1, 0) + pull);
  seeds.push_back(async + batched_pushes(1, 0) + batched_pushes(0, 0));
  seeds.push_back(sync + job_call<ParameterServer::StatsParams>(5) + job_call<ParameterServer::BackupsParams>(7));
  seeds.push_back(sync + job_call<ParameterServer::SettleParams>(9, 0) + job_call<ParameterServer::ReleaseHoldParams>(12));
  seeds.push_back(async + call(3, message_of<ParameterServer::WorkerFinishedParams>(
                                      [](ParameterServer::WorkerFinishedParams::Builder p) {
                                        p.setJobId("job-1");
                                        p.setWorker(1);
                                      })) +
                  job_call<ParameterServer::DropJobParams>(4));
  seeds.push_back(async + call(15, message_of<ParameterServer::PutStateParams>([](ParameterServer::PutStateParams::Builder p) {
                    p.setJobId("job-1");
                    p.initKeys(1).set(0, 0);
                    const float state[4] = {0.5f, -1.0f, 0.0f, 0.0f};  // two floats, then a position of 0
                    p.initStates(1).set(0, capnp::Data::Reader(reinterpret_cast<const uint8_t*>(state), sizeof state));
                  })));
  seeds.push_back(sync + job_call<ParameterServer::BackupAtParams>(8, 3) + job_call<ParameterServer::BackupNowParams>(10, 0) +
                  job_call<ParameterServer::RestoreParams>(6, 0));
  seeds.push_back(sync + call(0, message_of<ParameterServer::ConfigureParams>([](ParameterServer::ConfigureParams::Builder p) {
                    auto config = p.initConfig();
                    config.setJobId("job-2");
                    config.setSpecJson(job_spec_json(false));
                    pstrain::rpc::set_chunks(config.initChunks(static_cast<unsigned>(chunks().size())), chunks());
                    config.setWorkers(1);
                  })));
  seeds.push_back(sync + compressed_push(Encoding::kHalf, 0, 0, 0) + compressed_push(Encoding::kBfloat16, 0, 1, 0) + pull);
  seeds.push_back(async + compressed_push(Encoding::kTopk, 0, 0, 0) + compressed_push(Encoding::kLowRank, 0, 1, 0) + pull);
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(dir + "/seed-" + std::to_string(i), std::ios::binary) << seeds[i];
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("PSTRAIN_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  pstrain::set_log_level(pstrain::LogLevel::kError);
  // One thread: the chunks are tiny, and OpenMP's waiting threads would spin on a shared machine.
  omp_set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool sync = (data[0] & 1) != 0;
  ++data;
  --size;
  auto& ws = loop().ws;
  ParameterServer::Client server = kj::heap<pstrain::ParameterServerImpl>(nullptr);
  configure(server, sync);
  std::vector<kj::Promise<void>> waiting;
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 64 * 1024;
  options.nestingLimit = 16;
  for (int calls = 0; calls < 6 && size >= 3; ++calls) {
    const unsigned method = data[0] % kMethods;
    const size_t length = std::min<size_t>(size - 3, data[1] | (size_t{data[2]} << 8));
    data += 3;
    size -= 3;
    // Cap'n Proto reads words: the message is copied to aligned storage (as a socket read is).
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(length / sizeof(capnp::word));
    std::memcpy(words.begin(), data, words.size() * sizeof(capnp::word));
    data += length;
    size -= length;
    try {
      capnp::FlatArrayMessageReader reader(words, options);
      auto request = server.typelessRequest(capnp::typeId<ParameterServer>(), static_cast<uint16_t>(method), nullptr);
      request.set(reader.getRoot<capnp::AnyPointer>());
      auto promise = request.send().ignoreResult().catch_([](kj::Exception&&) {});
      if (promise.poll(ws)) {
        promise.wait(ws);
      } else {
        waiting.push_back(std::move(promise));
      }
    } catch (const kj::Exception&) {
      // A message that does not read (bad framing, over the limits): rejected before any call.
    }
  }
  for (auto& p : waiting) {
    if (p.poll(ws)) p.wait(ws);
  }
  waiting.clear();
  // Whatever the calls did, the server still answers (unless one dropped the job).
  auto stats = server.statsRequest();
  stats.setJobId("job-1");
  stats.send().ignoreResult().catch_([](kj::Exception&&) {}).wait(ws);
  return 0;
}

// The coordinator's storage and loading off the event loop: KvWriter (ordered, coalesced, durable
// on flush, callbacks after the write), JobStore on top of it (a state change survives a reopen,
// the step history too), and DataService::load (off the loop, once, a failure retried).
#include <doctest/doctest.h>
#include <kj/async-io.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "common/kv_store.h"
#include "coordinator/data_service.h"
#include "coordinator/event_stream.h"
#include "coordinator/job_store.h"
#include "coordinator/kv_writer.h"
#include "tests/test_support.h"

namespace pstrain {
namespace {

std::unique_ptr<KvStore> open_kv(const testing::TempDir& dir) {
  std::string error;
  auto kv = KvStore::open(dir.path(), &error);
  REQUIRE_MESSAGE(kv != nullptr, error);
  return kv;
}

std::string read(KvStore& kv, const std::string& key) {
  std::string value;
  const KvStatus status = kv.get(key, &value);
  return status.ok() ? value : "<" + status.message + ">";
}

}  // namespace

TEST_CASE("KvWriter: writes land in order, the last value of a key wins, callbacks follow their write") {
  testing::TempDir dir;
  auto kv = open_kv(dir);
  std::vector<int> seen;           // written by the writer thread only, read after flush()
  std::atomic<int> out_of_order{0};  // callbacks that ran before their write was readable
  {
    KvWriter writer(kv.get());
    for (int i = 0; i < 1000; ++i) {
      writer.enqueue({{"counter", std::to_string(i)}, {"key/" + std::to_string(i % 7), std::to_string(i)}}, i % 100 == 0,
                     [&seen, &out_of_order, &kv, i] {
                       // The batch carrying write i is applied before its callback runs.
                       std::string value;
                       if (!kv->get("key/" + std::to_string(i % 7), &value).ok() || std::stoi(value) < i) ++out_of_order;
                       seen.push_back(i);
                     });
    }
    writer.flush();
    CHECK(read(*kv, "counter") == "999");
    for (int k = 0; k < 7; ++k) CHECK(read(*kv, "key/" + std::to_string(k)) == std::to_string(999 - (999 - k) % 7));
    CHECK(writer.failures() == 0);
    writer.enqueue({{"after", "flush"}}, false);
  }  // the destructor applies what is still queued
  CHECK(read(*kv, "after") == "flush");
  CHECK(out_of_order == 0);
  REQUIRE(seen.size() == 1000);
  for (int i = 0; i < 1000; ++i) REQUIRE(seen[static_cast<size_t>(i)] == i);
}

TEST_CASE("KvWriter: a delete queued after a put removes it") {
  testing::TempDir dir;
  auto kv = open_kv(dir);
  KvWriter writer(kv.get());
  writer.enqueue({{"a", "1"}}, false);
  writer.enqueue({{"a", std::nullopt}}, true);
  writer.flush();
  std::string value;
  CHECK(kv->get("a", &value).code == KvStatus::Code::kNotFound);
}

TEST_CASE("JobStore: state changes, metrics and the model survive a reopen; readers see the durable state") {
  testing::TempDir dir;
  const std::string model(3000, 'm');
  {
    auto kv = open_kv(dir);
    JobStore store(kv.get());
    JobRecord record;
    record.id = "job-1";
    record.name = "mlp";
    record.submitted_ms = 1;
    store.add(record);
    store.update("job-1", [](JobRecord& r) { r.state = JobState::kRunning; });
    for (uint64_t s = 1; s <= 50; ++s) {
      store.append_step("job-1", {0, 1, s, 1.0 / static_cast<double>(s), 0.5, 100, 0});
      store.update("job-1", [s](JobRecord& r) { r.steps_done = static_cast<int64_t>(s); });
    }
    store.append_epoch("job-1", {1, 0.5, 0.8, 0.6, 0.79, 1000, 0});
    store.set_model("job-1", {model.substr(0, 5), model.substr(5)});  // in two pieces
    store.update("job-1", [](JobRecord& r) { r.state = JobState::kSucceeded; });
    store.flush();
    const auto seen = store.get("job-1");
    REQUIRE(seen);
    CHECK(seen->state == JobState::kSucceeded);  // durable after flush(), so visible
    CHECK(seen->steps_done == 50);
  }  // (the store is destroyed before its KvStore: what it queued is written first)
  auto kv = open_kv(dir);
  JobStore reopened(kv.get());
  const auto loaded = reopened.load();
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].state == JobState::kSucceeded);
  CHECK(loaded[0].steps_done == 50);
  CHECK(loaded[0].steps.size() == 50);
  CHECK(loaded[0].epoch_history.size() == 1);
  CHECK(loaded[0].has_model);
  CHECK(reopened.model("job-1") == model);
  CHECK(reopened.get("job-1")->state == JobState::kSucceeded);
}

TEST_CASE("DataService::load: off the event loop, once per split, and a failed load is tried again") {
  testing::TempDir dir;
  auto io = kj::setupAsyncIo();
  DataService data(idx_split_loader(dir.path()));
  // Missing files: the load fails on the loader thread and names the file; the loop keeps turning.
  auto missing = data.load("mnist10k", SplitKind::kTrain);
  bool loop_turned = false;
  auto tick = io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).then([&] { loop_turned = true; });
  const std::string error = testing::failure_of(kj::mv(missing), io.waitScope);
  CHECK(error.find("mnist10k-train-images-idx3-ubyte") != std::string::npos);
  tick.wait(io.waitScope);
  CHECK(loop_turned);
  // The files appear (copied from the real data directory): the next load tries again and works.
  for (const char* name : {"mnist10k-train-images-idx3-ubyte.gz", "mnist10k-train-labels-idx1-ubyte.gz"}) {
    std::filesystem::copy_file(testing::data_dir() + "/" + name, dir.file(name));
  }
  auto first = data.load("mnist10k", SplitKind::kTrain);
  auto second = data.load("mnist10k", SplitKind::kTrain);  // while the first is in flight: the same load
  const auto a = first.wait(io.waitScope), b = second.wait(io.waitScope);
  CHECK(a->size == 5002);
  CHECK(a.get() == b.get());
  CHECK(data.load("mnist10k", SplitKind::kTrain).wait(io.waitScope).get() == a.get());
}

}  // namespace pstrain

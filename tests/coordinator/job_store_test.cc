// The coordinator's storage and loading off the event loop: KvWriter (ordered, coalesced, durable
// on flush, callbacks after the write), JobStore on top of it (a state change survives a reopen,
// the step history too; a job's changes as numbered events, published once written, kept across a
// reopen), and DataService::load (off the loop, once, a failure retried).
#include <doctest/doctest.h>
#include <kj/async-io.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "common/base/json_text.h"
#include "common/storage/kv_store.h"
#include "coordinator/datasets/data_service.h"
#include "coordinator/base/event_stream.h"
#include "coordinator/store/job_codec.h"
#include "coordinator/store/job_json.h"
#include "coordinator/store/job_store.h"
#include "coordinator/store/kv_writer.h"
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

// The frames' "event:" types, in order.
std::vector<std::string> types(const std::vector<EventFrame>& frames) {
  std::vector<std::string> out;
  for (const EventFrame& f : frames) {
    const size_t at = f->find("\nevent: ") + 8;
    out.push_back(f->substr(at, f->find('\n', at) - at));
  }
  return out;
}

std::vector<EventFrame> take_all(EventSubscriber& s, bool* end = nullptr) {
  std::vector<EventFrame> out;
  for (int i = 0; i < 100; ++i) {
    auto batch = s.take(3);  // in small batches: take() goes on where it stopped
    out.insert(out.end(), batch.frames.begin(), batch.frames.end());
    if (end != nullptr) *end = batch.end;
    if (batch.frames.empty()) break;
  }
  return out;
}

}  // namespace

TEST_CASE("JobStore events: a job's changes become numbered events, published in order once written, kept across a "
          "reopen - a subscriber that falls behind is dropped without holding up the writer") {
  testing::TempDir dir;
  std::vector<EventFrame> first_run;
  {
    auto kv = open_kv(dir);
    JobStore store(*kv);
    store.set_node_lookup([](uint32_t id) -> std::optional<NodeView> {
      NodeView v;
      v.name = "node-" + std::to_string(id);
      return v;
    });
    JobRecord record;
    record.id = "job-1";
    record.submitted_ms = 5;
    store.add(record);
    auto live = std::make_shared<EventSubscriber>(EventQueueLimits{}, &store.event_stats());
    auto slow = std::make_shared<EventSubscriber>(EventQueueLimits{3, 1 << 20}, &store.event_stats());
    REQUIRE(store.subscribe("job-1", 0, live));
    REQUIRE(store.subscribe("job-1", 0, slow));
    CHECK_FALSE(store.subscribe("job-9", 0, live));
    CHECK(store.event_stats().open.load() == 2);
    int wakeups = 0;
    live->set_wakeup([&] { ++wakeups; });
    store.update("job-1", [](JobRecord& r) {
      r.state = JobState::kRunning;
      r.workers = {1, 2};
      r.servers = {3};
      r.total_steps = 100;
    });
    store.update("job-1", [](JobRecord& r) { r.steps_done = 10; });  // no event: progress comes with its step
    store.append_step("job-1", {1, 1, 10, 0.5, 0.75, 900, 7});
    store.append_epoch("job-1", {1, 0.5, 0.8, 0.6, 0.79, 1000, 8});
    store.update("job-1", [](JobRecord& r) { r.last_backup_step = 20; });
    store.update("job-1", [](JobRecord& r) {
      r.state = JobState::kRecovering;
      r.reason = "worker 1 lost";
    });
    store.update("job-1", [](JobRecord& r) {
      r.state = JobState::kRunning;
      r.notes.push_back("recovered: rolled back");  // the recovery's detail, not a note of its own
      r.reason.clear();
      r.workers = {2, 4};
      r.recoveries = 1;
      r.replayed_steps = {1};
    });
    store.update("job-1", [](JobRecord& r) { r.notes.push_back("a note"); });
    CheckpointInfo c;
    c.step = 20;
    store.add_checkpoint("job-1", c, {"abc"}, 3);
    store.add_checkpoint("job-1", c, {"abc"}, 3);  // the same again: no news
    store.update("job-1", [](JobRecord& r) { r.state = JobState::kSucceeded; });
    store.flush();
    CHECK(wakeups == 1);  // one until the subscriber takes
    bool end = false;
    first_run = take_all(*live, &end);
    CHECK(end);
    CHECK(types(first_run) == std::vector<std::string>{"state", "node", "node", "node", "state", "progress", "epoch",
                                                         "backup", "state", "node", "node", "recovery", "state", "note",
                                                         "checkpoint", "state"});
    for (size_t i = 0; i < first_run.size(); ++i) CHECK(first_run[i]->rfind("id: " + std::to_string(i + 1) + "\n", 0) == 0);
    CHECK(first_run[1]->find(R"("node":1,"role":"worker","name":"node-1","change":"joined")") != std::string::npos);
    CHECK(first_run[5]->find(R"("steps_done":10,"total_steps":100)") != std::string::npos);
    CHECK(first_run[8]->find(R"("state":"RECOVERING","reason":"worker 1 lost")") != std::string::npos);
    CHECK(first_run[9]->find(R"("node":1,"role":"worker","name":"node-1","change":"lost")") != std::string::npos);
    CHECK(first_run[11]->find(R"("recoveries":1,"replayed_steps":1,"detail":"recovered: rolled back")") != std::string::npos);
    CHECK(first_run[13]->find(R"("text":"a note")") != std::string::npos);
    CHECK(first_run.back()->find(R"("state":"SUCCEEDED")") != std::string::npos);
    CHECK(store.event_count("job-1") == first_run.size());
    CHECK(store.event_stats().events.load() == first_run.size());
    // The slow one never took anything: dropped at its 4th live event, and told so.
    CHECK(store.event_stats().dropped.load() == 1);
    const auto batch = slow->take();
    CHECK(batch.dropped);
    CHECK(batch.frames.empty());
    // The global sequence: the state changes only.
    auto global = std::make_shared<EventSubscriber>(EventQueueLimits{}, &store.event_stats());
    REQUIRE(store.subscribe("", 2, global));
    const auto states = take_all(*global);
    REQUIRE(states.size() == 3);  // of PENDING, RUNNING, RECOVERING, RUNNING, SUCCEEDED: after 2
    CHECK(states[0]->rfind("id: 3\nevent: state\n", 0) == 0);
  }
  auto kv = open_kv(dir);
  JobStore store(*kv);
  REQUIRE(store.load().size() == 1);
  // The history as it was, and the stream ends with it (the job is finished).
  auto replay = std::make_shared<EventSubscriber>(EventQueueLimits{}, &store.event_stats());
  REQUIRE(store.subscribe("job-1", 0, replay));
  bool end = false;
  const auto again = take_all(*replay, &end);
  CHECK(end);
  REQUIRE(again.size() == first_run.size());
  for (size_t i = 0; i < again.size(); ++i) CHECK(*again[i] == *first_run[i]);
  auto resumed = std::make_shared<EventSubscriber>(EventQueueLimits{}, &store.event_stats());
  REQUIRE(store.subscribe("job-1", 13, resumed));
  CHECK(take_all(*resumed).size() == first_run.size() - 13);
  // Numbering goes on: a new job's submission is global event 6.
  JobRecord next;
  next.id = "job-2";
  store.add(next);
  store.flush();
  auto global = std::make_shared<EventSubscriber>(EventQueueLimits{}, &store.event_stats());
  REQUIRE(store.subscribe("", 5, global));
  const auto states = take_all(*global);
  REQUIRE(states.size() == 1);
  CHECK(states[0]->rfind("id: 6\nevent: state\n", 0) == 0);
  CHECK(states[0]->find(R"("job":"job-2")") != std::string::npos);
}

TEST_CASE("KvWriter: writes land in order, the last value of a key wins, callbacks follow their write") {
  testing::TempDir dir;
  auto kv = open_kv(dir);
  std::vector<int> seen;           // written by the writer thread only, read after flush()
  std::atomic<int> out_of_order{0};  // callbacks that ran before their write was readable
  {
    KvWriter writer(*kv);
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
  KvWriter writer(*kv);
  writer.enqueue({{"a", "1"}}, false);
  writer.enqueue({{"a", std::nullopt}}, true);
  writer.flush();
  std::string value;
  CHECK(kv->get("a", &value).code == KvStatus::Code::kNotFound);
}

TEST_CASE("JobStore: state changes, metrics and the model survive a reopen - readers see the durable state") {
  testing::TempDir dir;
  const std::string model(3000, 'm');
  {
    auto kv = open_kv(dir);
    JobStore store(*kv);
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
  JobStore reopened(*kv);
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

TEST_CASE("JobStore: an async job's cut positions survive a reopen, dropped and erased cuts do not") {
  testing::TempDir dir;
  const std::vector<WorkerPosition> at60 = {{1, 5, 25}, {0, 20, 20}, {1, 0, 15}};
  const std::vector<WorkerPosition> at120 = {{2, 3, 43}, {1, 2, 42}, {0, 35, 35}};
  {
    kj::EventLoop loop;
    kj::WaitScope wait(loop);
    auto kv = open_kv(dir);
    JobStore store(*kv);
    for (const char* id : {"job-1", "job-2"}) {
      JobRecord record;
      record.id = id;
      store.add(record);
      store.set_async_cut(id, 30, {{0, 10, 10}, {0, 10, 10}, {0, 10, 10}}, {}).wait(wait);
      store.set_async_cut(id, 60, at60, {}).wait(wait);
      // Resolved once written: the key is on disk.
      CHECK(positions_from_json(read(*kv, "job/" + std::string(id) + "/cut/000000000060")) == at60);
      store.set_async_cut(id, 120, at120, {30}).wait(wait);  // the cut at 30 goes
      store.update(id, [](JobRecord& r) { r.last_backup_step = 120; });  // a record written after the cuts
    }
    store.erase_async_cuts("job-2");  // ended: nothing resumes it
  }
  auto kv = open_kv(dir);
  JobStore reopened(*kv);
  const auto loaded = reopened.load();
  REQUIRE(loaded.size() == 2);
  const JobRecord& job1 = loaded[0].id == "job-1" ? loaded[0] : loaded[1];
  const JobRecord& job2 = loaded[0].id == "job-1" ? loaded[1] : loaded[0];
  REQUIRE(job1.async_cuts.size() == 2);
  CHECK(job1.async_cuts.count(30) == 0);
  CHECK(job1.async_cuts.at(60) == at60);
  CHECK(job1.async_cuts.at(120) == at120);
  CHECK(job1.last_backup_step == 120);
  CHECK(job2.async_cuts.empty());
  CHECK(kv->keys("job/job-2/cut/").empty());
  CHECK(positions_from_json("[[1,2]]") == std::nullopt);
  CHECK(positions_from_json(positions_to_json(at60)) == at60);
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


TEST_CASE("JobStore: random doubles in records, steps and epochs come back with identical bits after a reopen, and "
          "the REST view's text is the same byte for byte") {
  testing::TempDir dir;
  std::mt19937_64 rng(48);
  // Any finite bit pattern: subnormals, 17 significant digits, exponents from -1074 to 1023.
  const auto any = [&rng] {
    for (;;) {
      const double d = std::bit_cast<double>(rng());
      if (std::isfinite(d)) return d;
    }
  };
  const auto fraction = [&rng] { return std::uniform_real_distribution<double>(0, 1)(rng); };
  std::vector<JobRecord> written;
  std::vector<std::string> views;
  {
    auto kv = open_kv(dir);
    JobStore store(*kv);
    for (int j = 0; j < 40; ++j) {
      JobRecord r;
      r.id = "job-" + std::to_string(j + 1);
      r.state = JobState::kSucceeded;
      r.samples_per_second = any();
      r.train_loss = any(), r.train_accuracy = fraction(), r.test_loss = any(), r.test_accuracy = fraction();
      r.test_top5_accuracy = fraction(), r.test_auc = any(), r.val_loss = any(), r.val_accuracy = fraction();
      r.bytes_pushed_per_step = {any(), any()};
      r.bytes_pulled_per_step = {any()};
      store.add(r);
      for (uint64_t s = 1; s <= 5; ++s) {
        // Bytes per step are stored to one decimal (round_to): such values.
        const double bytes = round_to(fraction() * 1e7, 1);
        StepMetric m{0, 1, s, any(), fraction(), any(), 0, bytes, round_to(bytes + 0.1, 1)};
        store.append_step(r.id, m);
        r.steps.push_back(m);
      }
      EpochMetric e;
      e.epoch = 1;
      e.train_loss = any(), e.train_accuracy = fraction(), e.test_loss = any(), e.test_accuracy = fraction();
      e.samples_per_second = any(), e.test_auc = any(), e.val_loss = any(), e.val_r2 = any();
      store.append_epoch(r.id, e);
      r.epoch_history.push_back(e);
      written.push_back(r);
    }
    store.flush();
    for (const JobRecord& r : written) views.push_back(job_status_json(*store.get(r.id), {}));
  }
  const auto bits = [](std::optional<double> d) { return d ? std::bit_cast<uint64_t>(*d) : uint64_t{0x7ff8dead}; };
  auto kv = open_kv(dir);
  JobStore reopened(*kv);
  const auto loaded = reopened.load();
  REQUIRE(loaded.size() == written.size());
  for (size_t j = 0; j < written.size(); ++j) {
    const JobRecord& a = written[j];
    const JobRecord b = *reopened.get(a.id);
    CAPTURE(a.id);
    CHECK(bits(a.samples_per_second) == bits(b.samples_per_second));
    for (auto field : {&JobRecord::train_loss, &JobRecord::train_accuracy, &JobRecord::test_loss,
                       &JobRecord::test_accuracy, &JobRecord::test_top5_accuracy, &JobRecord::test_auc,
                       &JobRecord::val_loss, &JobRecord::val_accuracy}) {
      CHECK(bits(a.*field) == bits(b.*field));
    }
    REQUIRE(b.bytes_pushed_per_step.size() == 2);
    CHECK(bits(a.bytes_pushed_per_step[1]) == bits(b.bytes_pushed_per_step[1]));
    REQUIRE(b.steps.size() == a.steps.size());
    for (size_t s = 0; s < a.steps.size(); ++s) {
      CHECK(bits(a.steps[s].loss) == bits(b.steps[s].loss));
      CHECK(bits(a.steps[s].accuracy) == bits(b.steps[s].accuracy));
      CHECK(bits(a.steps[s].bytes_pulled_per_step) == bits(b.steps[s].bytes_pulled_per_step));
    }
    REQUIRE(b.epoch_history.size() == 1);
    const EpochMetric &x = a.epoch_history[0], &y = b.epoch_history[0];
    CHECK(bits(x.train_loss) == bits(y.train_loss));
    CHECK(bits(x.test_accuracy) == bits(y.test_accuracy));
    CHECK(bits(x.test_auc) == bits(y.test_auc));
    CHECK(bits(x.val_r2) == bits(y.val_r2));
    // GET /v1/jobs/{id} before and after: the same bytes.
    CHECK(job_status_json(b, {}) == views[j]);
  }
}

}  // namespace pstrain

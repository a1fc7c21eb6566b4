#include "coordinator/job_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/error.h"
#include "common/log.h"
#include "coordinator/safetensors.h"

namespace pstrain {

const char* job_state_name(JobState state) {
  switch (state) {
    case JobState::kPending: return "PENDING";
    case JobState::kRunning: return "RUNNING";
    case JobState::kRecovering: return "RECOVERING";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
  }
  return "?";
}

JobRunner::JobRunner(std::string id, JobSpec spec, Cluster& cluster, DataService& data, JobStore& store,
                     kj::AsyncIoProvider& io, RecoveryOptions recovery_options, Finished on_finished)
    : id_(std::move(id)),
      spec_(std::move(spec)),
      spec_json_(job_spec_to_json(spec_)),
      cluster_(cluster),
      data_(data),
      store_(store),
      io_(io),
      recovery_options_(recovery_options),
      on_finished_(std::move(on_finished)),
      layout_(make_param_layout(spec_.model)),
      epochs_(static_cast<size_t>(spec_.training.epochs)) {
  const bool known = store_.update(id_, [this](JobRecord& r) {
    // A job a restarted coordinator had and re-queues: it resumes from its last complete backup
    // when its servers still hold it, else it starts over.
    // Its servers may still be training it: then it goes on from where they are (adopt).
    adopt_ = r.state == "RUNNING" || r.state == "RECOVERING";
    r.state = "PENDING";
    r.notes.push_back("re-queued after a coordinator restart");
    if (r.last_backup_step) complete_backups_.push_back(static_cast<uint64_t>(*r.last_backup_step));
    recorded_server_names_ = r.server_names;
    // Every plan from now on is newer than any the servers saw (pushes of older ones are fenced).
    generation_ = r.generation + 1;
  });
  if (!known) {
    JobRecord record;
    record.id = id_;
    record.name = spec_.name;
    record.spec_json = spec_json_;
    record.mode = training_mode_name(spec_.training.mode);
    record.epochs = spec_.training.epochs;
    record.submitted_ms = now_ms();
    store_.add(std::move(record));
  }
}

bool JobRunner::try_start() {
  if (state_ != JobState::kPending) return false;
  const auto servers = cluster_.free_nodes(proto::Role::SERVER);
  const auto workers = cluster_.free_nodes(proto::Role::WORKER);
  if (servers.size() < static_cast<size_t>(spec_.training.servers) ||
      workers.size() < static_cast<size_t>(spec_.training.workers)) {
    return false;
  }
  try {
    train_ = data_.split(spec_.dataset.name, SplitKind::kTrain);
    test_ = data_.split(spec_.dataset.name, SplitKind::kTest);
  } catch (const Error& e) {
    fail(e.what());
    return false;
  }
  // A job re-queued after a coordinator restart gets each server at the index whose backups it
  // holds: the name recorded for that index (a shard may have moved to a server of another
  // name), else name order (for servers that keep their names, as they should).
  std::vector<uint32_t> by_name = servers;
  std::sort(by_name.begin(), by_name.end(),
            [this](uint32_t a, uint32_t b) { return cluster_.find(a)->name < cluster_.find(b)->name; });
  std::vector<uint32_t> chosen(static_cast<size_t>(spec_.training.servers), 0);
  for (size_t i = 0; i < chosen.size() && i < recorded_server_names_.size(); ++i) {
    for (auto it = by_name.begin(); it != by_name.end(); ++it) {
      if (cluster_.find(*it)->name == recorded_server_names_[i]) {
        chosen[i] = *it;
        by_name.erase(it);
        break;
      }
    }
  }
  for (uint32_t& slot : chosen) {
    if (slot == 0) {
      slot = by_name.front();
      by_name.erase(by_name.begin());
    }
  }
  servers_ = chosen;
  workers_.assign(workers.begin(), workers.begin() + spec_.training.workers);
  for (uint32_t id : servers_) {
    NodeInfo* node = cluster_.find(id);
    node->job = id_;
    server_addresses_.push_back(node->address);
    server_names_.push_back(node->name);
  }
  for (uint32_t id : workers_) cluster_.find(id)->job = id_;
  worker_finished_.assign(workers_.size(), false);
  worker_lost_.assign(workers_.size(), false);
  chunks_ = plan_chunks(layout_, static_cast<uint32_t>(servers_.size()));
  plan_.emplace(spec_, train_->size, static_cast<uint32_t>(workers_.size()));
  state_ = JobState::kRunning;
  started_at_ = std::chrono::steady_clock::now();
  worker_steps_.assign(workers_.size(), 0);
  worker_rates_.assign(workers_.size(), 0.0);
  int64_t total_steps = 0;
  for (uint32_t w = 0; w < workers_.size(); ++w) total_steps += plan_->steps_per_epoch(w) * spec_.training.epochs;
  if (spec_.training.mode == TrainingMode::kSync) total_steps = plan_->steps_per_epoch(0) * spec_.training.epochs;
  store_.update(id_, [&](JobRecord& r) {
    r.state = "RUNNING";
    r.started_ms = now_ms();
    r.workers = workers_;
    r.servers = servers_;
    r.server_names = server_names_;
    r.generation = std::max(r.generation, generation_);
    r.steps_per_epoch = plan_->steps_per_epoch(0);
    r.total_steps = total_steps;
  });
  PSLOG(kInfo) << "job " << id_ << " ('" << spec_.name << "'): starting on " << servers_.size() << " server(s) and "
               << workers_.size() << " worker(s), " << layout_.total_size() << " parameters in " << chunks_.size()
               << " chunks, " << plan_->steps_per_epoch(0) << " steps per epoch";
  background_ = configure_servers().eagerlyEvaluate([this](kj::Exception&& e) {
    fail(std::string("could not configure the parameter servers: ") + e.getDescription().cStr());
  });
  return true;
}

kj::Promise<void> JobRunner::connect_server(size_t i) {
  const rpc::HostPort address = rpc::parse_host_port(server_addresses_[i], 7100, "server address");
  return rpc::connect(io_.getNetwork(), address).then([this, i](kj::Own<rpc::Connection> c) {
    server_connections_[i] = kj::mv(c);
    server_clients_[i] = server_connections_[i]->bootstrap().castAs<proto::ParameterServer>();
  });
}

kj::Promise<void> JobRunner::configure_server(size_t i) {
  auto request = server_clients_[i].configureRequest();
  auto config = request.initConfig();
  config.setJobId(id_);
  config.setSpecJson(spec_json_);
  rpc::set_chunks(config.initChunks(static_cast<unsigned>(chunks_.size())), chunks_);
  config.setServerIndex(static_cast<uint32_t>(i));
  config.setWorkers(static_cast<uint32_t>(workers_.size()));
  config.setStepsPerEpoch(static_cast<uint64_t>(plan_->steps_per_epoch(0)));
  config.setMinGeneration(generation_);
  return request.send().ignoreResult();
}

kj::Promise<void> JobRunner::configure_servers() {
  server_connections_.resize(servers_.size());
  server_clients_.clear();
  for (size_t i = 0; i < servers_.size(); ++i) server_clients_.push_back(nullptr);
  kj::Vector<kj::Promise<void>> ready;
  for (size_t i = 0; i < servers_.size(); ++i) ready.add(connect_server(i));
  return kj::joinPromises(ready.releaseAsArray()).then([this]() -> kj::Promise<void> {
    if (!adopt_ || !sync()) return configure_and_resume();
    // After a coordinator restart, the servers may hold the job still: go on from their state.
    return adopt_running_servers().catch_([this](kj::Exception&& e) {
      PSLOG(kInfo) << "job " << id_ << ": cannot take over the servers' state (" << e.getDescription().cStr()
                   << "); configuring them afresh";
      return configure_and_resume();
    });
  }).then([this] {
    configured_ = true;
    PSLOG(kInfo) << "job " << id_ << ": servers configured; workers may start";
  });
}

kj::Promise<void> JobRunner::configure_and_resume() {
  kj::Vector<kj::Promise<void>> configured;
  for (size_t i = 0; i < servers_.size(); ++i) configured.add(configure_server(i));
  return kj::joinPromises(configured.releaseAsArray()).then([this]() -> kj::Promise<void> {
    // (Async positions are not kept across a coordinator restart: an async job starts over.)
    if (complete_backups_.empty() || !sync()) return kj::READY_NOW;
    // Resuming after a coordinator restart: from the last backup, if the servers have it.
    return restore_servers({complete_backups_.back()}).then([this](uint64_t version) {
      resume_version_ = version;
      ++generation_;  // past the restore's fence (restore_servers fences below generation_ + 1)
      store_.update(id_, [&](JobRecord& r) { r.generation = std::max(r.generation, generation_); });
      PSLOG(kInfo) << "job " << id_ << ": resuming from the backup at step " << version;
    });
  });
}

kj::Promise<void> JobRunner::adopt_running_servers() {
  // Workers' sessions end at step boundaries when the coordinator goes (their data stream or
  // report fails between steps), so a sync job's chunks all stand at one step v: the workers'
  // new plan starts there and nothing is replayed. Pushes of the old plan still waiting at the
  // servers are failed and fenced off by a settle at v.
  kj::Vector<kj::Promise<std::pair<uint64_t, uint64_t>>> probes;
  for (auto& client : server_clients_) {
    auto request = client.backupAtRequest();
    request.setJobId(id_);
    request.setVersion(std::numeric_limits<uint64_t>::max());
    probes.add(request.send().then([](auto&& r) { return std::make_pair(r.getLowestVersion(), r.getCurrentVersion()); }));
  }
  return kj::joinPromises(probes.releaseAsArray()).then([this](kj::Array<std::pair<uint64_t, uint64_t>> versions) {
    const uint64_t version = versions[0].first;
    for (const auto& [low, high] : versions) {
      KJ_REQUIRE(low == version && high == version, "the servers' chunks are not at one step", low, high, version);
    }
    kj::Vector<kj::Promise<void>> settled;
    for (auto& client : server_clients_) {
      // Settle first (it fails the old plan's waiting pushes), then lift any cut hold the old
      // coordinator left: lifted first, the hold could let an old step apply.
      auto settle = client.settleRequest();
      settle.setJobId(id_);
      settle.setVersion(version);
      settle.setGeneration(generation_);
      auto release = client.releaseHoldRequest();
      release.setJobId(id_);
      settled.add(settle.send().ignoreResult().then([release = kj::mv(release)]() mutable {
        return release.send().ignoreResult();
      }));
    }
    return kj::joinPromises(settled.releaseAsArray()).then([this, version] {
      resume_version_ = version;
      ledger_.clear();
      PSLOG(kInfo) << "job " << id_ << ": took over the servers' state at step " << version
                   << " after a coordinator restart; 0 step(s) to replay";
      store_.update(id_, [&](JobRecord& r) {
        r.notes.push_back("coordinator restarted: went on from the servers' state at step " + std::to_string(version) +
                          ", 0 step(s) replayed");
        r.steps_done = static_cast<int64_t>(version);
        r.recoveries = ++recoveries_;
        r.replayed_steps.push_back(0);
      });
    });
  });
}

int JobRunner::worker_index(uint32_t node) const {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i] == node) return static_cast<int>(i);
  }
  return -1;
}

bool JobRunner::fill_assignment(uint32_t node, proto::Assignment::Builder out) const {
  const int index = worker_index(node);
  if (index < 0 || !configured_ || state_ != JobState::kRunning) return false;
  if (worker_finished_[static_cast<size_t>(index)]) return false;  // done; the job is wrapping up
  out.setJobId(id_);
  out.setSpecJson(spec_json_);
  out.setWorkerIndex(static_cast<uint32_t>(index));
  out.setWorkerCount(static_cast<uint32_t>(workers_.size()));
  rpc::set_chunks(out.initChunks(static_cast<unsigned>(chunks_.size())), chunks_);
  auto servers = out.initServers(static_cast<unsigned>(server_addresses_.size()));
  for (size_t i = 0; i < server_addresses_.size(); ++i) servers.set(static_cast<unsigned>(i), server_addresses_[i]);
  out.setStepsPerEpoch(static_cast<uint64_t>(plan_->steps_per_epoch(static_cast<uint32_t>(index))));
  const auto steps_per_epoch = static_cast<uint64_t>(plan_->steps_per_epoch(static_cast<uint32_t>(index)));
  if (!sync() && static_cast<size_t>(index) < resume_positions_.size()) {
    out.setStartEpoch(resume_positions_[static_cast<size_t>(index)].epoch);
    out.setStartStep(resume_positions_[static_cast<size_t>(index)].step);
  } else {
    out.setStartEpoch(static_cast<uint32_t>(resume_version_ / steps_per_epoch));
    out.setStartStep(resume_version_ % steps_per_epoch);
  }
  out.setGeneration(generation_);
  return true;
}

proto::DataStream::Client JobRunner::open_shard(uint32_t node, proto::Split split, uint32_t epoch, uint64_t from_step) {
  const int index = worker_index(node);
  KJ_REQUIRE(index >= 0, "this node is not a worker of the job", node, id_);
  KJ_REQUIRE(epoch < spec_.training.epochs, "epoch out of range", epoch);
  const auto worker = static_cast<uint32_t>(index);
  if (split == proto::Split::TEST) {
    const int64_t batch = (spec_.training.global_batch_size + workers_.size() - 1) / workers_.size();
    return data_.open_test(test_, worker, static_cast<uint32_t>(workers_.size()), batch);
  }
  KJ_REQUIRE(static_cast<int64_t>(from_step) <= plan_->steps_per_epoch(worker), "step out of range", from_step);
  if (!sync()) return data_.open_train(train_, *plan_, epoch, worker, static_cast<int64_t>(from_step));
  const auto steps_per_epoch = static_cast<uint64_t>(plan_->steps_per_epoch(0));
  return data_.open_train(train_, *plan_, epoch, worker, static_cast<int64_t>(from_step),
                          [this, epoch, worker, steps_per_epoch, generation = generation_](
                              int64_t step, const std::vector<uint32_t>& indices) {
                            if (generation != generation_) return;  // a stream of an abandoned plan
                            ledger_[epoch * steps_per_epoch + static_cast<uint64_t>(step)][worker] = indices;
                          });
}

bool JobRunner::on_progress(uint32_t node, proto::Progress::Reader report) {
  const int index = worker_index(node);
  KJ_REQUIRE(index >= 0, "this node is not a worker of the job", node, id_);
  if (state_ != JobState::kRunning) return false;
  const uint32_t epoch = report.getEpoch();
  KJ_REQUIRE(epoch < epochs_.size(), "epoch out of range", epoch);
  EpochMetrics& m = epochs_[epoch];
  switch (report.getKind()) {
    case proto::Progress::Kind::STEPS: {
      m.train_loss_sum += report.getLossSum();
      m.train_correct += report.getCorrect();
      m.train_examples += report.getExamples();
      const double n = std::max<uint64_t>(1, report.getExamples());
      const double loss = report.getLossSum() / n, accuracy = report.getCorrect() / n;
      worker_steps_[static_cast<size_t>(index)] = report.getStep();
      worker_rates_[static_cast<size_t>(index)] = report.getSamplesPerSecond();
      store_.append_step(id_, {static_cast<uint32_t>(index), epoch + 1, report.getStep(), loss, accuracy,
                               report.getSamplesPerSecond(), now_ms()});
      store_.update(id_, [&](JobRecord& r) {
        uint64_t done = 0;
        for (uint64_t steps : worker_steps_) done = sync() ? std::max(done, steps) : done + steps;
        r.steps_done = static_cast<int64_t>(done);
        r.current_epoch = epoch + 1;
        double rate = 0;
        for (double x : worker_rates_) rate += x;
        r.samples_per_second = rate;
        r.train_loss = loss;
        r.train_accuracy = accuracy;
      });
      PSLOG(kInfo) << "job " << id_ << " worker " << index << ": epoch " << epoch + 1 << " step " << report.getStep()
                   << " loss " << report.getLossSum() / std::max<uint64_t>(1, report.getExamples()) << " "
                   << static_cast<int64_t>(report.getSamplesPerSecond()) << " samples/s";
      maybe_cut_async();
      break;
    }
    case proto::Progress::Kind::EVALUATION:
      m.test_loss_sum += report.getLossSum();
      m.test_correct += report.getCorrect();
      m.test_examples += report.getExamples();
      m.samples_per_second += report.getSamplesPerSecond();
      if (++m.evaluations == workers_.size()) record_epoch(epoch, false);
      break;
    case proto::Progress::Kind::FINISHED:
      worker_finished_[static_cast<size_t>(index)] = true;
      cut_expects_no_more(node);
      finish_if_done();
      break;
    case proto::Progress::Kind::FAILED:
      fail("worker " + std::to_string(index) + ": " + rpc::to_string(report.getMessage()));
      return false;
  }
  return true;
}

void JobRunner::record_epoch(uint32_t epoch, bool partial) {
  EpochMetrics& m = epochs_[epoch];
  if (m.recorded) return;
  m.recorded = true;
  const double train_n = std::max<uint64_t>(1, m.train_examples), test_n = std::max<uint64_t>(1, m.test_examples);
  const EpochMetric metric{epoch + 1,         m.train_loss_sum / train_n, m.train_correct / train_n,
                           m.test_loss_sum / test_n, m.test_correct / test_n, m.samples_per_second,
                           now_ms()};
  std::printf("epoch %u: train loss %.4f accuracy %.4f | test loss %.4f accuracy %.4f | %.0f samples/s%s\n", epoch + 1,
              metric.train_loss, metric.train_accuracy, metric.test_loss, metric.test_accuracy,
              metric.samples_per_second, partial ? " (test: part of the split, a worker was lost)" : "");
  std::fflush(stdout);
  store_.append_epoch(id_, metric);
  store_.update(id_, [&](JobRecord& r) {
    r.test_loss = metric.test_loss;
    r.test_accuracy = metric.test_accuracy;
    r.train_loss = metric.train_loss;
    r.train_accuracy = metric.train_accuracy;
    if (partial) {
      r.notes.push_back("epoch " + std::to_string(epoch + 1) + ": test metrics on " + std::to_string(m.test_examples) +
                        " examples (a worker was lost before evaluating its part)");
    }
  });
}

void JobRunner::record_partial_epochs(uint32_t before) {
  for (uint32_t e = 0; e < before && e < epochs_.size(); ++e) {
    if (!epochs_[e].recorded && epochs_[e].evaluations > 0) record_epoch(e, true);
  }
}

void JobRunner::finish_if_done() {
  for (bool done : worker_finished_) {
    if (!done) return;
  }
  record_partial_epochs(static_cast<uint32_t>(epochs_.size()));
  background_ = collect_parameters().eagerlyEvaluate([this](kj::Exception&& e) {
    if (e.getType() == kj::Exception::Type::DISCONNECTED && state_ == JobState::kRunning) {
      // A server died after the last step: like any server loss, recover (from its last backup;
      // the workers redo the steps after it) and collect again at the end.
      recover("a server was lost while the trained parameters were collected");
      return;
    }
    fail(std::string("could not collect the trained parameters: ") + e.getDescription().cStr());
  });
}

kj::Promise<void> JobRunner::collect_parameters() {
  final_params_.assign(layout_.total_size(), 0.0f);
  kj::Vector<kj::Promise<void>> pulls;
  for (const ChunkInfo& chunk : chunks_) {
    auto request = server_clients_[chunk.server].pullRequest();
    request.setJobId(id_);
    request.setKey(chunk.key);
    request.setMinVersion(0);
    pulls.add(request.send().then([this, chunk](capnp::Response<proto::ParameterServer::PullResults>&& r) {
      const auto values = rpc::tensor_view(r.getValues(), chunk.size, "final parameters");
      std::copy(values.begin(), values.end(), final_params_.begin() + static_cast<long>(layout_.params()[chunk.param].offset + chunk.offset));
    }));
  }
  return kj::joinPromises(pulls.releaseAsArray()).then([this] {
    if (state_ != JobState::kRunning) return;  // cancelled or failed meanwhile
    state_ = JobState::kSucceeded;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count();
    const EpochMetrics& last = epochs_.back();
    const double accuracy = last.test_examples ? static_cast<double>(last.test_correct) / last.test_examples : 0.0;
    PSLOG(kInfo) << "job " << id_ << ": SUCCEEDED in " << seconds << " s";
    if (sync()) check_ledger();
    std::printf("final test accuracy: %.4f\n", accuracy);
    std::fflush(stdout);
    store_.set_model(id_, encode_safetensors(layout_, final_params_, {{"job", id_}, {"name", spec_.name}}));
    store_.update(id_, [&](JobRecord& r) {
      r.state = "SUCCEEDED";
      r.reason.clear();
      r.finished_ms = now_ms();
      r.steps_done = r.total_steps;
    });
    drop_on_servers();
    release_nodes();
    if (on_finished_) on_finished_(*this);
  });
}

void JobRunner::drop_on_servers() {
  for (auto& client : server_clients_) {
    auto request = client.dropJobRequest();
    request.setJobId(id_);
    request.send().detach([](kj::Exception&&) {});
  }
}

JobRunner::CancelOutcome JobRunner::cancel() {
  if (state_ == JobState::kSucceeded || state_ == JobState::kFailed || state_ == JobState::kCancelled) {
    return CancelOutcome::kAlreadyFinished;
  }
  end(JobState::kCancelled, "cancelled by request");
  return CancelOutcome::kCancelled;
}

void JobRunner::end(JobState state, const std::string& reason) {
  const bool was_running = state_ == JobState::kRunning;
  state_ = state;
  failure_ = reason;
  store_.update(id_, [&](JobRecord& r) {
    r.state = job_state_name(state);
    r.reason = reason;
    r.finished_ms = now_ms();
  });
  if (was_running) drop_on_servers();
  release_nodes();
  if (on_finished_) on_finished_(*this);
}

void JobRunner::fail(const std::string& reason) {
  if (state_ == JobState::kSucceeded || state_ == JobState::kFailed || state_ == JobState::kCancelled) return;
  PSLOG(kError) << "job " << id_ << ": FAILED: " << reason;
  end(JobState::kFailed, reason);
}

void JobRunner::release_nodes() {
  for (uint32_t id : servers_) {
    if (NodeInfo* n = cluster_.find(id); n != nullptr && n->job == id_) n->job.clear();
  }
  for (uint32_t id : workers_) {
    if (NodeInfo* n = cluster_.find(id); n != nullptr && n->job == id_) n->job.clear();
  }
}

}  // namespace pstrain

namespace pstrain {

void JobRunner::check_ledger() {
  const auto steps_per_epoch = static_cast<uint64_t>(plan_->steps_per_epoch(0));
  std::vector<std::vector<uint32_t>> uses(static_cast<size_t>(spec_.training.epochs), std::vector<uint32_t>(train_->size, 0));
  for (const auto& [step, by_worker] : ledger_) {
    const uint64_t epoch = step / steps_per_epoch;
    if (epoch >= uses.size()) continue;
    for (const auto& [worker, indices] : by_worker) {
      for (uint32_t i : indices) ++uses[epoch][i];
    }
  }
  const uint64_t audited_from = ledger_.empty() ? 0 : ledger_.begin()->first;
  for (size_t e = 0; e < uses.size(); ++e) {
    if (e * steps_per_epoch < audited_from) {
      std::printf("examples of epoch %zu: not audited (trained before a coordinator restart)\n", e + 1);
      continue;
    }
    uint64_t once = 0, missing = 0, repeated = 0;
    for (uint32_t n : uses[e]) {
      once += n == 1;
      missing += n == 0;
      repeated += n > 1;
    }
    std::printf("examples of epoch %zu: %llu used once, %llu missing, %llu used more than once\n", e + 1,
                static_cast<unsigned long long>(once), static_cast<unsigned long long>(missing),
                static_cast<unsigned long long>(repeated));
  }
  std::fflush(stdout);
}

}  // namespace pstrain

#include "coordinator/job/job_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "common/log.h"
#include "coordinator/safetensors.h"

namespace pstrain {

const char* JobRunner::phase_name(Phase phase) {
  switch (phase) {
    case Phase::kPending: return "pending";
    case Phase::kConfiguring: return "configuring";
    case Phase::kRunning: return "running";
    case Phase::kCutting: return "cutting";
    case Phase::kTakingOver: return "taking over";
    case Phase::kRecovering: return "recovering";
    case Phase::kSucceeded: return "succeeded";
    case Phase::kFailed: return "failed";
    case Phase::kCancelled: return "cancelled";
  }
  return "?";
}

JobState JobRunner::state() const {
  switch (phase_) {
    case Phase::kPending: return JobState::kPending;
    case Phase::kConfiguring:
    case Phase::kRunning:
    case Phase::kCutting:
    case Phase::kTakingOver: return JobState::kRunning;
    case Phase::kRecovering: return JobState::kRecovering;
    case Phase::kSucceeded: return JobState::kSucceeded;
    case Phase::kFailed: return JobState::kFailed;
    case Phase::kCancelled: return JobState::kCancelled;
  }
  return JobState::kFailed;
}

JobRunner::JobRunner(std::string id, JobSpec spec, Cluster& cluster, DataService& data, JobStore& store,
                     kj::AsyncIoProvider& io, JobOptions options, Finished on_finished)
    : id_(std::move(id)),
      spec_(std::move(spec)),
      spec_json_(job_spec_to_json(spec_)),
      cluster_(cluster),
      data_(data),
      store_(store),
      io_(io),
      options_(options),
      on_finished_(std::move(on_finished)),
      layout_(make_param_layout(spec_.model)),
      servers_(id_, io, options_),
      progress_(id_, static_cast<uint32_t>(spec_.training.epochs), store) {
  const bool known = store_.update(id_, [this](JobRecord& r) {
    // A job a restarted coordinator had and re-queues: it resumes from its last complete backup
    // when its servers still hold it, else it starts over.
    // Its servers may still be training it: then it goes on from where they are (adopt).
    requeued_while_running_ = r.state == JobState::kRunning || r.state == JobState::kRecovering;
    r.state = JobState::kPending;
    r.notes.push_back("re-queued after a coordinator restart");
    if (r.last_backup_step) backups_.add_complete(static_cast<uint64_t>(*r.last_backup_step));
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
  if (phase_ != Phase::kPending) return false;
  const auto free_servers = cluster_.free_nodes(proto::Role::SERVER);
  const auto free_workers = cluster_.free_nodes(proto::Role::WORKER);
  if (free_servers.size() < static_cast<size_t>(spec_.training.servers) ||
      free_workers.size() < static_cast<size_t>(spec_.training.workers)) {
    return false;
  }
  // A job re-queued after a coordinator restart gets each server at the index whose backups it
  // holds: the name recorded for that index (a shard may have moved to a server of another
  // name), else name order (for servers that keep their names, as they should).
  std::vector<uint32_t> by_name = free_servers;
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
  std::vector<ServerMember> members;
  for (uint32_t& slot : chosen) {
    if (slot == 0) {
      slot = by_name.front();
      by_name.erase(by_name.begin());
    }
    NodeInfo* node = cluster_.find(slot);
    node->job = id_;
    members.push_back({slot, node->name, node->address});
  }
  workers_.assign(free_workers.begin(), free_workers.begin() + spec_.training.workers);
  for (uint32_t id : workers_) cluster_.find(id)->job = id_;
  progress_.reset_workers(workers_.size(), 0);
  chunks_ = plan_chunks(layout_, static_cast<uint32_t>(members.size()));
  phase_ = Phase::kConfiguring;
  started_at_ = std::chrono::steady_clock::now();
  store_.update(id_, [&](JobRecord& r) {
    r.state = state();
    r.started_ms = now_ms();
    r.workers = workers_;
    r.servers = chosen;
    r.generation = std::max(r.generation, generation_);
  });
  background_ = start(std::move(members)).eagerlyEvaluate([this](kj::Exception&& e) {
    fail(std::string("could not start: ") + e.getDescription().cStr());
  });
  return true;
}

kj::Promise<void> JobRunner::start(std::vector<ServerMember> members) {
  servers_.assign(std::move(members));
  store_.update(id_, [&](JobRecord& r) { r.server_names = servers_.names(); });
  // The dataset loads off the event loop (once per coordinator, shared by the jobs that use it).
  auto train = data_.load(spec_.dataset.name, SplitKind::kTrain);
  auto test = data_.load(spec_.dataset.name, SplitKind::kTest);
  return train.then([this, test = kj::mv(test)](std::shared_ptr<const Split> train) mutable {
    train_ = std::move(train);
    return kj::mv(test);
  }).then([this](std::shared_ptr<const Split> test) {
    test_ = std::move(test);
    plan_.emplace(spec_, train_->size, static_cast<uint32_t>(workers_.size()));
    int64_t total_steps = 0;
    for (uint32_t w = 0; w < workers_.size(); ++w) total_steps += plan_->steps_per_epoch(w) * spec_.training.epochs;
    if (sync()) total_steps = plan_->steps_per_epoch(0) * spec_.training.epochs;
    store_.update(id_, [&](JobRecord& r) {
      r.steps_per_epoch = plan_->steps_per_epoch(0);
      r.total_steps = total_steps;
    });
    PSLOG(kInfo) << "job " << id_ << " ('" << spec_.name << "'): starting on " << servers_.size() << " server(s) and "
                 << workers_.size() << " worker(s), " << layout_.total_size() << " parameters in " << chunks_.size()
                 << " chunks, " << plan_->steps_per_epoch(0) << " steps per epoch";
    return configure_servers();
  });
}

void JobRunner::fill_server_config(proto::JobConfig::Builder config) const {
  config.setJobId(id_);
  config.setSpecJson(spec_json_);
  rpc::set_chunks(config.initChunks(static_cast<unsigned>(chunks_.size())), chunks_);
  config.setWorkers(static_cast<uint32_t>(workers_.size()));
  config.setStepsPerEpoch(static_cast<uint64_t>(plan_->steps_per_epoch(0)));
  config.setMinGeneration(generation_);
}

kj::Promise<void> JobRunner::configure_servers() {
  return servers_.connect_all()
      .then([this]() -> kj::Promise<void> {
        if (!requeued_while_running_ || !sync()) return configure_and_resume();
        // After a coordinator restart, the servers may hold the job still: go on from their state.
        return adopt_running_servers().catch_([this](kj::Exception&& e) {
          PSLOG(kInfo) << "job " << id_ << ": cannot take over the servers' state (" << e.getDescription().cStr()
                       << "); configuring them afresh";
          return configure_and_resume();
        });
      })
      .then([this] {
        if (phase_ != Phase::kConfiguring) return;  // a loss during configuration started a recovery
        phase_ = Phase::kRunning;
        PSLOG(kInfo) << "job " << id_ << ": servers configured; workers may start";
      });
}

kj::Promise<void> JobRunner::configure_and_resume() {
  return servers_.configure_all([this](proto::JobConfig::Builder c) { fill_server_config(c); })
      .then([this]() -> kj::Promise<void> {
        // (Async positions are not kept across a coordinator restart: an async job starts over.)
        const auto latest = backups_.latest();
        if (!latest || !sync()) return kj::READY_NOW;
        // Resuming after a coordinator restart: from the last backup, if the servers have it.
        return restore_servers({*latest}).then([this](uint64_t version) {
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
  // servers are failed and fenced off by a settle at v, and any cut hold the old coordinator
  // left is lifted after it.
  return servers_.versions().then([this](kj::Array<ServerVersions> versions) {
    const uint64_t version = versions[0].lowest;
    for (const auto& v : versions) {
      KJ_REQUIRE(v.lowest == version && v.highest == version, "the servers' chunks are not at one step", v.lowest,
                 v.highest, version);
    }
    return servers_.settle_and_release(version, generation_).then([this, version] {
      resume_version_ = version;
      progress_.clear_ledger();
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

std::optional<size_t> JobRunner::worker_index(uint32_t node) const {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i] == node) return i;
  }
  return std::nullopt;
}

bool JobRunner::fill_assignment(uint32_t node, proto::Assignment::Builder out) const {
  const auto index = worker_index(node);
  if (!index || !workers_may_run()) return false;
  if (progress_.workers()[*index].finished) return false;  // done; the job is wrapping up
  const auto worker = static_cast<uint32_t>(*index);
  out.setJobId(id_);
  out.setSpecJson(spec_json_);
  out.setWorkerIndex(worker);
  out.setWorkerCount(static_cast<uint32_t>(workers_.size()));
  rpc::set_chunks(out.initChunks(static_cast<unsigned>(chunks_.size())), chunks_);
  auto servers = out.initServers(static_cast<unsigned>(servers_.size()));
  for (size_t i = 0; i < servers_.size(); ++i) servers.set(static_cast<unsigned>(i), servers_[i].address);
  const auto steps_per_epoch = static_cast<uint64_t>(plan_->steps_per_epoch(worker));
  out.setStepsPerEpoch(steps_per_epoch);
  if (!sync() && *index < resume_positions_.size()) {
    out.setStartEpoch(resume_positions_[*index].epoch);
    out.setStartStep(resume_positions_[*index].step);
  } else {
    out.setStartEpoch(static_cast<uint32_t>(resume_version_ / steps_per_epoch));
    out.setStartStep(resume_version_ % steps_per_epoch);
  }
  out.setGeneration(generation_);
  return true;
}

proto::DataStream::Client JobRunner::open_shard(uint32_t node, proto::Split split, uint32_t epoch, uint64_t from_step) {
  const auto index = worker_index(node);
  KJ_REQUIRE(index.has_value(), "this node is not a worker of the job", node, id_);
  KJ_REQUIRE(plan_.has_value(), "the job's data is not loaded yet", id_);
  KJ_REQUIRE(epoch < spec_.training.epochs, "epoch out of range", epoch);
  const auto worker = static_cast<uint32_t>(*index);
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
                            progress_.served(epoch * steps_per_epoch + static_cast<uint64_t>(step), worker, indices);
                          });
}

bool JobRunner::on_progress(uint32_t node, proto::Progress::Reader report) {
  const auto index = worker_index(node);
  KJ_REQUIRE(index.has_value(), "this node is not a worker of the job", node, id_);
  if (state() != JobState::kRunning) return false;
  const uint32_t epoch = report.getEpoch();
  KJ_REQUIRE(epoch < progress_.epochs().size(), "epoch out of range", epoch);
  switch (report.getKind()) {
    case proto::Progress::Kind::STEPS: {
      EpochMetrics& m = progress_.epochs()[epoch];
      m.train_loss_sum += report.getLossSum();
      m.train_correct += report.getCorrect();
      m.train_examples += report.getExamples();
      const double n = std::max<uint64_t>(1, report.getExamples());
      const double loss = report.getLossSum() / n, accuracy = report.getCorrect() / n;
      WorkerProgress& w = progress_.workers()[*index];
      w.steps = report.getStep();
      w.rate = report.getSamplesPerSecond();
      store_.append_step(id_, {static_cast<uint32_t>(*index), epoch + 1, report.getStep(), loss, accuracy,
                               report.getSamplesPerSecond(), now_ms()});
      store_.update(id_, [&](JobRecord& r) {
        r.steps_done = static_cast<int64_t>(progress_.steps_done(sync()));
        r.current_epoch = epoch + 1;
        r.samples_per_second = progress_.total_rate();
        r.train_loss = loss;
        r.train_accuracy = accuracy;
      });
      PSLOG(kInfo) << "job " << id_ << " worker " << *index << ": epoch " << epoch + 1 << " step " << report.getStep()
                   << " loss " << loss << " " << static_cast<int64_t>(report.getSamplesPerSecond()) << " samples/s";
      maybe_cut_async();
      break;
    }
    case proto::Progress::Kind::EVALUATION:
      progress_.add_evaluation(epoch, report.getLossSum(), report.getCorrect(), report.getExamples(),
                               report.getSamplesPerSecond(), workers_.size());
      break;
    case proto::Progress::Kind::FINISHED:
      progress_.workers()[*index].finished = true;
      cut_expects_no_more(node);
      finish_if_done();
      break;
    case proto::Progress::Kind::FAILED:
      fail("worker " + std::to_string(*index) + ": " + rpc::to_string(report.getMessage()));
      return false;
  }
  return true;
}

void JobRunner::finish_if_done() {
  if (!progress_.all_finished()) return;
  progress_.record_partial_epochs(static_cast<uint32_t>(progress_.epochs().size()));
  background_ = collect_parameters().eagerlyEvaluate([this](kj::Exception&& e) {
    if (e.getType() == kj::Exception::Type::DISCONNECTED && state() == JobState::kRunning) {
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
  return servers_.pull_all(chunks_, layout_, final_params_).then([this] {
    if (state() != JobState::kRunning) return;  // cancelled or failed meanwhile
    phase_ = Phase::kSucceeded;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count();
    PSLOG(kInfo) << "job " << id_ << ": SUCCEEDED in " << seconds << " s";
    if (sync()) progress_.check_ledger(static_cast<uint64_t>(plan_->steps_per_epoch(0)), train_->size);
    std::printf("final test accuracy: %.4f\n", progress_.final_accuracy());
    std::fflush(stdout);
    store_.set_model(id_, encode_safetensors(layout_, final_params_, {{"job", id_}, {"name", spec_.name}}));
    store_.update(id_, [&](JobRecord& r) {
      r.state = state();
      r.reason.clear();
      r.finished_ms = now_ms();
      r.steps_done = r.total_steps;
    });
    servers_.drop_job();
    release_nodes();
    if (on_finished_) on_finished_(*this);
  });
}

JobRunner::CancelOutcome JobRunner::cancel() {
  if (is_finished(state())) return CancelOutcome::kAlreadyFinished;
  end(Phase::kCancelled, "cancelled by request");
  return CancelOutcome::kCancelled;
}

void JobRunner::end(Phase phase, const std::string& reason) {
  const bool was_running = state() == JobState::kRunning;
  phase_ = phase;
  failure_ = reason;
  store_.update(id_, [&](JobRecord& r) {
    r.state = state();
    r.reason = reason;
    r.finished_ms = now_ms();
  });
  if (was_running) servers_.drop_job();
  release_nodes();
  if (on_finished_) on_finished_(*this);
}

void JobRunner::fail(const std::string& reason) {
  if (is_finished(state())) return;
  PSLOG(kError) << "job " << id_ << ": FAILED: " << reason;
  end(Phase::kFailed, reason);
}

void JobRunner::release_nodes() {
  for (uint32_t id : servers_.nodes()) {
    if (NodeInfo* n = cluster_.find(id); n != nullptr && n->job == id_) n->job.clear();
  }
  for (uint32_t id : workers_) {
    if (NodeInfo* n = cluster_.find(id); n != nullptr && n->job == id_) n->job.clear();
  }
}

}  // namespace pstrain

#include "coordinator/job/job_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/base/cross_thread.h"
#include "common/data/dataset.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/base/log.h"
#include "coordinator/job/adoption.h"
#include "common/engine/safetensors.h"

namespace pstrain {
namespace {

// The classes the job's model scores (the spec was checked against its dataset): one per output,
// 2 for binary cross-entropy's one output, 0 for a regression model.
int64_t output_classes(const JobSpec& spec) {
  if (is_regression(spec.loss)) return 0;
  const std::vector<Shape> shapes = infer_shapes(spec.model);
  int64_t n = 1;
  for (int64_t d : shapes.back()) n *= d;
  return nn::loss_classes(spec.loss, n);
}

}  // namespace

JobRunner::JobRunner(std::string id, JobSpec spec, Cluster& cluster, DataService& data, JobStore& store,
                     kj::AsyncIoProvider& io, JobOptions options, Finished on_finished, JobOrigin origin)
    : job_(std::move(id), std::move(spec), cluster, data, store, io, options),
      on_finished_(std::move(on_finished)),
      guard_(output_classes(job_.spec)) {
  job_.progress.set_classes(output_classes(job_.spec));
  job_.progress.set_validation(job_.spec.training.validation_fraction > 0);
  job_.progress.on_epoch_recorded([this](uint32_t epoch, std::optional<double> test_accuracy) {
    diverged(guard_.epoch_recorded(epoch, test_accuracy));
    if (!is_finished(job_.state()) && early_stop_.epoch_recorded()) stop_early();
  });
  std::optional<JobRecord> before;
  const bool known = store.update(job_.id, [this, &before](JobRecord& r) {
    // A job a restarted coordinator had and re-queues (Adoption): it goes on from where its
    // servers are, or from its newest complete backup wherever that is.
    before = r;
    r.state = JobState::kPending;
    r.notes.push_back("re-queued after a coordinator restart");
    // Node ids are this coordinator's: the ones recorded were given by the one before (the same
    // numbers may now name other nodes). The job's nodes are recorded again when it starts.
    r.workers.clear();
    r.servers.clear();
    // Async: the workers' positions at the cuts the coordinator before stored.
    async_cuts_.load(r.async_cuts);
    // Every plan from now on is newer than any the servers saw (pushes of older ones are fenced).
    job_.generation = r.generation + 1;
  });
  if (before) adoption_.load(*before);
  if (!known) {
    JobRecord record;
    record.id = job_.id;
    record.name = job_.spec.name;
    record.spec_json = job_.spec_json;
    record.mode = training_mode_name(job_.spec.training.mode);
    record.epochs = job_.spec.training.epochs;
    record.submitted_ms = now_ms();
    record.study = std::move(origin.study);
    record.trial = origin.trial;
    store.add(std::move(record));
  }
}

// --- Starting ---

bool JobRunner::try_start(const std::set<std::string>& awaited) {
  if (job_.phase != Phase::kPending) return false;
  Cluster& cluster = job_.cluster;
  const auto free_workers = cluster.free_nodes(proto::Role::WORKER);
  if (free_workers.size() < static_cast<size_t>(job_.spec.training.workers)) return false;
  // Each server at the index whose backups it holds (Adoption::place).
  const auto chosen = adoption_.place(cluster.free_nodes(proto::Role::SERVER), awaited,
                                      static_cast<size_t>(job_.spec.training.servers));
  if (!chosen) return false;
  std::vector<ServerMember> members;
  for (NodeId slot : *chosen) {
    NodeInfo* node = cluster.find(slot);
    node->job = job_.id;
    members.push_back({slot, node->name, node->address});
  }
  job_.workers.assign(free_workers.begin(), free_workers.begin() + job_.spec.training.workers);
  for (NodeId id : job_.workers) cluster.find(id)->job = job_.id;
  job_.progress.reset_workers(job_.workers.size(), 0);
  job_.chunks = plan_chunks(job_.layout, static_cast<uint32_t>(members.size()));
  job_.phase = Phase::kConfiguring;
  started_at_ = std::chrono::steady_clock::now();
  job_.store.update(job_.id, [&](JobRecord& r) {
    r.state = job_.state();
    r.started_ms = now_ms();
    r.workers = node_numbers(job_.workers);
    r.servers = node_numbers(*chosen);
    r.generation = std::max(r.generation, job_.generation);
  });
  background_ = start(std::move(members)).eagerlyEvaluate([this](kj::Exception&& e) {
    fail(std::string("could not start: ") + e.getDescription().cStr());
  });
  return true;
}

kj::Promise<void> JobRunner::start(std::vector<ServerMember> members) {
  job_.servers.assign(std::move(members));
  job_.store.update(job_.id, [&](JobRecord& r) { r.server_names = job_.servers.names(); });
  // The data service prepares the job's data off the event loop (splits loaded once per
  // coordinator and shared; the hold-out, class weights and a table's preprocessing per job).
  return job_.data.prepare(job_.data_recipe())
      .then([this](std::shared_ptr<const JobData> data) -> kj::Promise<void> {
        job_.take_data(*data);
        // Cancelled (or failed) while the data loaded: its nodes are free again, leave them be.
        if (job_.phase != Phase::kConfiguring) return kj::READY_NOW;
        // The spec was checked against the dataset table at submit; the files may still disagree.
        for (const Split* split : {job_.train.get(), job_.test.get()}) {
          try {
            check_spec_against_dataset(job_.spec, *split);
          } catch (const SpecError& e) {
            kj::throwFatalException(kj::Exception(
                kj::Exception::Type::FAILED, __FILE__, __LINE__,
                kj::str("dataset '", split->dataset, "' as loaded (", split->kind == SplitKind::kTrain ? "train" : "test",
                        " split) does not fit the job: ", e.what())));
          }
        }
        job_.plan.emplace(job_.spec, job_.train->size, job_.slices());
        int64_t total_steps = 0;
        for (uint32_t w = 0; w < job_.workers.size(); ++w) total_steps += job_.plan->steps_per_epoch(w);
        if (job_.sync()) total_steps = job_.plan->steps_per_epoch(0);
        total_steps *= job_.spec.training.epochs;
        job_.store.update(job_.id, [&](JobRecord& r) {
          r.steps_per_epoch = job_.plan->steps_per_epoch(0);
          r.total_steps = total_steps;
        });
        PSLOG(kInfo) << "job " << job_.id << " ('" << job_.spec.name << "'): starting on " << job_.servers.size()
                     << " server(s) and " << job_.workers.size() << " worker(s), " << job_.layout.total_size()
                     << " parameters in " << job_.chunks.size() << " chunks, " << job_.plan->steps_per_epoch(0)
                     << " steps per epoch";
        return configure_servers();
      });
}

kj::Promise<void> JobRunner::configure_servers() {
  return job_.servers.connect_all()
      .then([this]() -> kj::Promise<void> {
        if (!adoption_.requeued_while_running()) return configure_and_resume();
        // How far the job had come (async: to count the steps a cut replays; sync: the steps a
        // backup replays), then fresh shards and a restore.
        const auto from_backup = [this] {
          return servers_reached().then([this](uint64_t reached) {
            reached_before_restart_ = std::max(reached, adoption_.steps_done_before());
            return configure_and_resume();
          });
        };
        // A server at another index than before holds no state of this one: from a backup.
        if (!job_.sync() || !adoption_.moved().empty()) return from_backup();
        // After a coordinator restart, the servers may hold the job still: go on from their state.
        return adopt().catch_([this, from_backup](kj::Exception&& e) {
          PSLOG(kInfo) << "job " << job_.id << ": cannot take over the servers' state (" << e.getDescription().cStr()
                       << "); configuring them afresh";
          return from_backup();
        });
      })
      .then([this] {
        if (job_.phase != Phase::kConfiguring) return;  // a loss during configuration started a recovery
        job_.phase = Phase::kRunning;
        PSLOG(kInfo) << "job " << job_.id << ": servers configured; workers may start";
      });
}

kj::Promise<void> JobRunner::configure_and_resume() {
  return job_.servers.configure_all(job_.server_config()).then([this]() -> kj::Promise<void> {
    if (checkpointer_.starts_from_file()) {
      return checkpointer_.start_from_file().then([this](uint64_t version) { job_.resume_version = version; });
    }
    if (!adoption_.requeued_while_running()) return kj::READY_NOW;
    if (!job_.sync()) return resume_async();
    // Resuming after a coordinator restart: from the newest complete backup (the servers' own,
    // what they all hold, or what the ledger knows), from the replicas for servers placed at
    // another index (Adoption).
    return adoption_.adopt_replicas([](uint64_t) { return true; })
        .then([this](std::optional<uint64_t> adopted) {
          return rollback_.common_backups().then([this, adopted](std::vector<uint64_t> candidates) -> kj::Promise<void> {
            if (adopted) std::erase_if(candidates, [&](uint64_t v) { return v > *adopted; });
            if (candidates.empty()) {
              PSLOG(kInfo) << "job " << job_.id << ": no complete backup; the job starts over";
              return kj::READY_NOW;
            }
            return rollback_.restore(kj::mv(candidates)).then([this](uint64_t version) { resumed_sync(version); });
          });
        });
  });
}

void JobRunner::resumed_sync(uint64_t version) {
  job_.resume_version = version;
  job_.restarted = true;
  ++job_.generation;  // past the restore's fence (it fences below generation + 1)
  const uint64_t replayed = reached_before_restart_ > version ? reached_before_restart_ - version : 0;
  PSLOG(kInfo) << "job " << job_.id << ": resuming from the backup at step " << version
               << " after a coordinator restart; the job had reached step " << reached_before_restart_ << ": "
               << replayed << " step(s) to replay";
  job_.store.update(job_.id, [&](JobRecord& r) {
    r.generation = std::max(r.generation, job_.generation);
    r.notes.push_back("coordinator restarted: resumed from the backup at step " + std::to_string(version) + ", " +
                      std::to_string(replayed) + " step(s) replayed");
    r.steps_done = static_cast<int64_t>(version);
    r.recoveries = ++job_.recoveries;
    r.replayed_steps.push_back(static_cast<int64_t>(replayed));
  });
}

kj::Promise<uint64_t> JobRunner::servers_reached() {
  // Where the servers stood before they are configured afresh (how far the job had come): the
  // furthest chunk's version; 0 if a server no longer holds the job.
  return job_.servers.versions()
      .then([](kj::Array<ServerVersions> versions) {
        uint64_t reached = 0;
        for (const auto& v : versions) reached = std::max(reached, v.highest);
        return reached;
      })
      .catch_([](kj::Exception&&) { return uint64_t{0}; });
}

kj::Promise<void> JobRunner::resume_async() {
  // Async after a coordinator restart (DESIGN-NOTES "Async state across a coordinator restart"):
  // the servers go back to the newest complete cut whose positions were stored, and every worker
  // resumes where it stood at that cut. The steps after the cut are redone; their first pushes
  // are undone by the restore, so every example counts once in the parameters. Complete: held by
  // every server (or recorded so): a kill can come after the servers' last backupDone and before
  // the record naming it reaches the disk, while the positions were queued before the cut began.
  // Servers placed at another index first adopt the replicas of the newest such cut (Adoption).
  return adoption_.adopt_replicas([this](uint64_t v) { return async_cuts_.has_positions(v); })
      .then([this](std::optional<uint64_t> adopted) { return rollback_.common_backups().then(
          [this, adopted](std::vector<uint64_t> held) -> kj::Promise<void> {
            std::erase_if(held, [&](uint64_t v) { return !async_cuts_.has_positions(v) || (adopted && v > *adopted); });
            return resume_async_from(kj::mv(held));
          }); });
}

kj::Promise<void> JobRunner::resume_async_from(std::vector<uint64_t> candidates) {
  if (candidates.empty()) {
    PSLOG(kInfo) << "job " << job_.id << ": no complete consistent cut stored; the async job starts over";
    job_.store.update(job_.id, [&](JobRecord& r) {
      r.notes.push_back("coordinator restarted: no complete consistent cut stored, the async job started over");
    });
    return kj::READY_NOW;
  }
  auto restored = rollback_.restore(candidates).catch_([this](kj::Exception&& e) {
    // No stored cut could be restored (each failed its checks on some server): start over.
    const std::string note = std::string("coordinator restarted: no stored consistent cut could be restored (") +
                             e.getDescription().cStr() + "), the async job started over";
    PSLOG(kWarning) << "job " << job_.id << ": " << note;
    job_.store.update(job_.id, [&](JobRecord& r) { r.notes.push_back(note); });
    return rollback_.restore({});
  });
  return restored.then([this](uint64_t version) {
    ++job_.generation;  // past the restore's fence (it fences below generation + 1)
    const size_t first_epoch = async_cuts_.resume(job_.workers, version);
    job_.progress.restart_epochs_from(first_epoch);
    std::string where;
    for (size_t i = 0; i < job_.workers.size() && i < job_.resume_positions.size(); ++i) {
      const WorkerPosition& p = job_.resume_positions[i];
      job_.progress.workers()[i].steps = p.steps_done;
      where += (i ? ", " : "") + std::to_string(i) + ": epoch " + std::to_string(p.epoch + 1) + " step " +
               std::to_string(p.step) + " (" + std::to_string(p.steps_done) + " done)";
    }
    const uint64_t replayed = reached_before_restart_ > version ? reached_before_restart_ - version : 0;
    PSLOG(kInfo) << "job " << job_.id << ": async job resumed from the consistent cut at step " << version
                 << " after a coordinator restart (workers " << where << "); the servers had reached step "
                 << reached_before_restart_ << ": " << replayed << " step(s) to replay";
    job_.store.update(job_.id, [&](JobRecord& r) {
      r.generation = std::max(r.generation, job_.generation);
      r.notes.push_back("coordinator restarted: the async job resumed from the consistent cut at step " +
                        std::to_string(version) + ", " + std::to_string(replayed) + " step(s) replayed");
      r.steps_done = static_cast<int64_t>(version);
      r.recoveries = ++job_.recoveries;
      r.replayed_steps.push_back(static_cast<int64_t>(replayed));
    });
  });
}

kj::Promise<void> JobRunner::adopt() {
  return adopt_servers_state(job_).then([this](uint64_t version) {
    job_.resume_version = version;
    job_.restarted = true;
    job_.progress.clear_ledger();
    PSLOG(kInfo) << "job " << job_.id << ": took over the servers' state at step " << version
                 << " after a coordinator restart; 0 step(s) to replay";
    job_.store.update(job_.id, [&](JobRecord& r) {
      r.notes.push_back("coordinator restarted: went on from the servers' state at step " + std::to_string(version) +
                        ", 0 step(s) replayed");
      r.steps_done = static_cast<int64_t>(version);
      r.recoveries = ++job_.recoveries;
      r.replayed_steps.push_back(0);
    });
  });
}

// --- Workers ---

bool JobRunner::evaluates_resumed_epoch(uint64_t steps_per_epoch) const {
  const uint64_t v = job_.resume_version;
  if (!job_.restarted || !job_.sync() || steps_per_epoch == 0 || v == 0 || v % steps_per_epoch != 0) return false;
  const auto record = job_.store.get(job_.id);
  if (!record) return false;
  const auto ended = static_cast<uint32_t>(v / steps_per_epoch);  // 1-based: the epoch that ends at v
  for (const auto& e : record->epoch_history) {
    if (e.epoch == ended) return false;
  }
  return true;
}

bool JobRunner::fill_assignment(NodeId node, proto::Assignment::Builder out) const {
  const auto index = job_.worker_index(node);
  if (!index || !job_.workers_may_run()) return false;
  if (job_.progress.workers()[*index].finished) return false;  // done; the job is wrapping up
  const auto worker = static_cast<uint32_t>(*index);
  out.setJobId(job_.id);
  out.setSpecJson(job_.spec_json);
  out.setWorkerIndex(worker);
  out.setWorkerCount(job_.slices());
  const auto mine = job_.slices_of(*index);
  auto extras = out.initExtraSlices(static_cast<unsigned>(mine.size() - 1));
  for (size_t i = 1; i < mine.size(); ++i) extras.set(static_cast<unsigned>(i - 1), mine[i]);
  rpc::set_chunks(out.initChunks(static_cast<unsigned>(job_.chunks.size())), job_.chunks);
  auto servers = out.initServers(static_cast<unsigned>(job_.servers.size()));
  for (size_t i = 0; i < job_.servers.size(); ++i) servers.set(static_cast<unsigned>(i), job_.servers[i].address);
  const auto steps_per_epoch = static_cast<uint64_t>(job_.plan->steps_per_epoch(worker));
  out.setStepsPerEpoch(steps_per_epoch);
  if (!job_.sync() && *index < job_.resume_positions.size()) {
    out.setStartEpoch(job_.resume_positions[*index].epoch);
    out.setStartStep(job_.resume_positions[*index].step);
  } else if (evaluates_resumed_epoch(steps_per_epoch)) {
    // The epoch that ends at the resume step, from its end: no step, then its evaluation.
    out.setStartEpoch(static_cast<uint32_t>(job_.resume_version / steps_per_epoch - 1));
    out.setStartStep(steps_per_epoch);
  } else {
    out.setStartEpoch(static_cast<uint32_t>(job_.resume_version / steps_per_epoch));
    out.setStartStep(job_.resume_version % steps_per_epoch);
  }
  out.setGeneration(job_.generation);
  if (!job_.options.coordinator_key.empty()) {
    // The worker's pass to the job's servers (they check it against the key in their JobConfig).
    const std::string token = rpc::worker_token(rpc::job_key(job_.options.coordinator_key, job_.id), node.value());
    out.setWorkerToken(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(token.data()), token.size()));
  }
  return true;
}

proto::DataStream::Client JobRunner::open_shard(NodeId node, proto::Split split, uint32_t epoch, uint64_t from_step,
                                                int64_t slice) {
  const auto index = job_.worker_index(node);
  KJ_REQUIRE(index.has_value(), "this node is not a worker of the job", node, job_.id);
  KJ_REQUIRE(job_.plan.has_value(), "the job's data is not loaded yet", job_.id);
  KJ_REQUIRE(epoch < job_.spec.training.epochs, "epoch out of range", epoch);
  uint32_t worker = static_cast<uint32_t>(*index);  // the slice whose data: the worker's own, or an extra
  if (slice >= 0) {
    const auto mine = job_.slices_of(*index);
    KJ_REQUIRE(std::find(mine.begin(), mine.end(), static_cast<uint32_t>(slice)) != mine.end() ||
                   (split == proto::Split::TRAIN && takeover_.granted(node, static_cast<uint32_t>(slice))),
               "the worker does not compute this slice", slice, node);
    worker = static_cast<uint32_t>(slice);
  }
  const auto workers = job_.slices();
  if (split == proto::Split::TEST || split == proto::Split::VALIDATION) {
    const int64_t batch = (job_.spec.training.global_batch_size + workers - 1) / workers;
    const bool validation = split == proto::Split::VALIDATION;
    KJ_REQUIRE(!validation || job_.validation, "the job holds out no validation examples", job_.id);
    return job_.data.open_test(validation ? job_.validation : job_.test, worker, workers, batch);
  }
  KJ_REQUIRE(static_cast<int64_t>(from_step) <= job_.plan->steps_per_epoch(worker), "step out of range", from_step);
  if (!job_.sync()) return job_.data.open_train(job_.train, *job_.plan, epoch, worker, static_cast<int64_t>(from_step));
  const uint64_t steps_per_epoch = job_.steps_per_epoch();
  return job_.data.open_train(job_.train, *job_.plan, epoch, worker, static_cast<int64_t>(from_step),
                              [this, epoch, worker, steps_per_epoch, generation = job_.generation](
                                  int64_t step, const std::vector<uint32_t>& indices) {
                                if (generation != job_.generation) return;  // a stream of an abandoned plan
                                job_.progress.served(epoch * steps_per_epoch + static_cast<uint64_t>(step), worker,
                                                     indices);
                              });
}

bool JobRunner::on_progress(NodeId node, proto::Progress::Reader report) {
  const auto index = job_.worker_index(node);
  KJ_REQUIRE(index.has_value(), "this node is not a worker of the job", node, job_.id);
  if (job_.state() != JobState::kRunning) return false;
  const uint32_t epoch = report.getEpoch();
  JobProgress& progress = job_.progress;
  KJ_REQUIRE(epoch < progress.epochs().size(), "epoch out of range", epoch);
  switch (report.getKind()) {
    case proto::Progress::Kind::STEPS: {
      EpochMetrics& m = progress.epochs()[epoch];
      m.train_loss_sum += report.getLossSum();
      m.train_correct += report.getCorrect();
      m.train_examples += report.getExamples();
      const double n = std::max<uint64_t>(1, report.getExamples());
      const double loss = report.getLossSum() / n, accuracy = report.getCorrect() / n;
      if (report.getExamples() > 0) guard_.train_window(epoch, loss);
      WorkerProgress& w = progress.workers()[*index];
      w.steps = report.getStep();
      w.rate = report.getSamplesPerSecond();
      job_.store.update(job_.id, [&](JobRecord& r) {
        r.steps_done = static_cast<int64_t>(progress.steps_done(job_.sync()));
        r.current_epoch = epoch + 1;
        r.samples_per_second = progress.total_rate();
        r.train_loss = loss;
        r.train_accuracy = is_regression(job_.spec.loss) ? std::nullopt : std::optional<double>(accuracy);
        r.bytes_pushed_per_step.resize(std::max(r.bytes_pushed_per_step.size(), *index + 1));
        r.bytes_pulled_per_step.resize(std::max(r.bytes_pulled_per_step.size(), *index + 1));
        r.bytes_pushed_per_step[*index] = report.getBytesPushedPerStep();
        r.bytes_pulled_per_step[*index] = report.getBytesPulledPerStep();
      });
      // After the update: its progress event carries the job's steps done with this report.
      job_.store.append_step(job_.id, {static_cast<uint32_t>(*index), epoch + 1, report.getStep(), loss, accuracy,
                                       report.getSamplesPerSecond(), now_ms(), report.getBytesPushedPerStep(),
                                       report.getBytesPulledPerStep()});
      PSLOG(kInfo) << "job " << job_.id << " worker " << *index << ": epoch " << epoch + 1 << " step "
                   << report.getStep() << " loss " << loss << " " << static_cast<int64_t>(report.getSamplesPerSecond())
                   << " samples/s, " << static_cast<int64_t>(report.getBytesPushedPerStep()) << " B pushed and "
                   << static_cast<int64_t>(report.getBytesPulledPerStep()) << " B pulled per step";
      async_cuts_.maybe_start();
      break;
    }
    case proto::Progress::Kind::EVALUATION:
    case proto::Progress::Kind::VALIDATION: {
      EvaluationSums sums;
      sums.loss_sum = report.getLossSum();
      sums.correct = report.getCorrect();
      sums.examples = report.getExamples();
      sums.top_k_correct = report.getTopKCorrect();
      sums.reports = 1;
      if (report.hasRegression()) {
        const auto r = report.getRegression();
        sums.regression = nn::RegressionSums{r.getValues(), r.getAbsError(), r.getSquaredError(), r.getTarget(),
                                             r.getTargetSquared()};
      }
      if (report.hasAucPositives() && report.hasAucNegatives()) {
        const auto pos = report.getAucPositives(), neg = report.getAucNegatives();
        nn::BinaryScores& binary = sums.binary.emplace();
        for (unsigned j = 0; j < pos.size() && j < binary.positives.size(); ++j) binary.positives[j] = pos[j];
        for (unsigned j = 0; j < neg.size() && j < binary.negatives.size(); ++j) binary.negatives[j] = neg[j];
      }
      const bool validation = report.getKind() == proto::Progress::Kind::VALIDATION;
      progress.add_evaluation(epoch, validation, sums, report.getSamplesPerSecond(), job_.workers.size());
      break;
    }
    case proto::Progress::Kind::FINISHED:
      progress.workers()[*index].finished = true;
      async_cuts_.expects_no_more(node);
      finish_if_done();
      break;
    case proto::Progress::Kind::FAILED:
      if (report.getDiverged()) {
        // Always a failure (whatever on_divergence says): there is nothing to train on from NaNs.
        diverged({DivergenceGuard::loss_not_finite(epoch, "worker " + std::to_string(*index) + ": " +
                                                              rpc::to_string(report.getMessage()))});
      }
      fail("worker " + std::to_string(*index) + ": " + rpc::to_string(report.getMessage()));
      return false;
  }
  return true;
}

kj::Promise<WorkerOrder> JobRunner::watch(NodeId node, uint64_t generation) {
  KJ_REQUIRE(job_.worker_index(node).has_value(), "this node is not a worker of the job", node, job_.id);
  // A session of a superseded plan is told so at once (end_watches told the ones already open).
  KJ_REQUIRE(generation >= job_.generation, "re-planned: get a new assignment", generation, job_.generation);
  if (generation != job_.generation || job_.state() != JobState::kRunning) return kj::NEVER_DONE;
  auto paf = kj::newPromiseAndFulfiller<WorkerOrder>();
  job_.watchers[node] = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

kj::Promise<void> JobRunner::paused(NodeId node, uint64_t cut, Position position) {
  KJ_REQUIRE(job_.worker_index(node).has_value(), "this node is not a worker of the job", node, job_.id);
  return async_cuts_.paused(node, cut, position);
}

}  // namespace pstrain

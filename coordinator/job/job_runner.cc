#include "coordinator/job/job_runner.h"

#include <algorithm>

#include "common/data/dataset.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/base/log.h"

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
      guard_(output_classes(job_.spec)),
      faults_(job_, early_stop_, checkpointer_,
              {[this](const std::string& reason) { fail(reason); }, [this] { finish_if_done(); },
               [this](uint32_t epoch) { guard_.restart_epochs_from(epoch); }}) {
  job_.progress.set_classes(output_classes(job_.spec));
  job_.progress.set_validation(job_.spec.training.validation_fraction > 0);
  job_.progress.on_epoch_recorded([this](uint32_t epoch, std::optional<double> test_accuracy) {
    diverged(guard_.epoch_recorded(epoch, test_accuracy));
    plateau_.epoch_recorded();
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
    faults_.async_cuts().load(r.async_cuts);
    // Every plan from now on is newer than any the servers saw (pushes of older ones are fenced).
    job_.generation = r.generation + 1;
  });
  if (before) faults_.adoption().load(*before);
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
  if (job_.phase != JobPhase::kPending) return false;
  Cluster& cluster = job_.cluster;
  const auto free_workers = cluster.free_nodes(proto::Role::WORKER);
  if (free_workers.size() < static_cast<size_t>(job_.spec.training.workers)) return false;
  // Each server at the index whose backups it holds (Adoption::place).
  const auto chosen = faults_.adoption().place(cluster.free_nodes(proto::Role::SERVER), awaited,
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
  job_.phase = JobPhase::kConfiguring;
  started_at_ = std::chrono::steady_clock::now();
  job_.store.update(job_.id, [&](JobRecord& r) {
    r.state = job_.state();
    r.started_ms = now_ms();
    r.workers = node_numbers(job_.workers);
    r.servers = node_numbers(*chosen);
    r.generation = std::max(r.generation, job_.generation);
  });
  background_ = startup_.run(std::move(members)).eagerlyEvaluate([this](kj::Exception&& e) {
    fail(std::string("could not start: ") + e.getDescription().cStr());
  });
  return true;
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

namespace {

void set_stored_shards(const Split& split, proto::StoredShards::Builder out) {
  out.setDir(split.store->dir);
  auto files = out.initFiles(static_cast<unsigned>(split.store->files.size()));
  for (size_t i = 0; i < split.store->files.size(); ++i) files.set(static_cast<unsigned>(i), split.store->files[i]);
  auto crcs = out.initCrcs(static_cast<unsigned>(split.store->crcs.size()));
  for (size_t i = 0; i < split.store->crcs.size(); ++i) crcs.set(static_cast<unsigned>(i), split.store->crcs[i]);
  const Split::StoredShards::HoldOut& hold_out = split.store->hold_out;
  out.setExamples(hold_out.fraction > 0 ? hold_out.stored_examples : split.size);
  out.setPreprocessing(split.store->preprocessing);
  out.setTable(split.store->table);
  out.setHoldOutFraction(hold_out.fraction);
  out.setHoldOutSeed(hold_out.seed);
  auto texts = out.initTextColumns(static_cast<unsigned>(split.store->text_columns.size()));
  for (size_t k = 0; k < split.store->text_columns.size(); ++k) {
    const Split::StoredShards::TextColumn& t = split.store->text_columns[k];
    auto column = texts[static_cast<unsigned>(k)];
    column.setColumn(t.column);
    auto names = column.initFiles(static_cast<unsigned>(t.files.size()));
    for (size_t i = 0; i < t.files.size(); ++i) names.set(static_cast<unsigned>(i), t.files[i]);
    auto sums = column.initCrcs(static_cast<unsigned>(t.crcs.size()));
    for (size_t i = 0; i < t.crcs.size(); ++i) sums.set(static_cast<unsigned>(i), t.crcs[i]);
  }
}

}  // namespace

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
  // Splits as stored: a worker that sees the shards reads its examples itself (on_served()).
  if (job_.prepared.train->store) set_stored_shards(*job_.prepared.train, out.initTrainStore());
  if (job_.prepared.test->store) set_stored_shards(*job_.prepared.test, out.initTestStore());
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
                   (split == proto::Split::TRAIN && faults_.takeover().granted(node, static_cast<uint32_t>(slice))),
               "the worker does not compute this slice", slice, node);
    worker = static_cast<uint32_t>(slice);
  }
  const auto workers = job_.slices();
  if (split == proto::Split::TEST || split == proto::Split::VALIDATION) {
    const int64_t batch = (job_.spec.training.global_batch_size + workers - 1) / workers;
    const bool validation = split == proto::Split::VALIDATION;
    KJ_REQUIRE(!validation || job_.prepared.validation, "the job holds out no validation examples", job_.id);
    return job_.data.open_test(validation ? job_.prepared.validation : job_.prepared.test, worker, workers, batch);
  }
  KJ_REQUIRE(static_cast<int64_t>(from_step) <= job_.plan->steps_per_epoch(worker), "step out of range", from_step);
  if (!job_.sync()) return job_.data.open_train(job_.prepared.train, *job_.plan, epoch, worker, static_cast<int64_t>(from_step));
  const uint64_t steps_per_epoch = job_.steps_per_epoch();
  return job_.data.open_train(job_.prepared.train, *job_.plan, epoch, worker, static_cast<int64_t>(from_step),
                              [this, epoch, worker, steps_per_epoch, generation = job_.generation](
                                  int64_t step, const std::vector<uint32_t>& indices) {
                                if (generation != job_.generation) return;  // a stream of an abandoned plan
                                job_.progress.ledger().served(epoch * steps_per_epoch + static_cast<uint64_t>(step), worker,
                                                     indices);
                              });
}

void JobRunner::on_served(NodeId node, uint64_t generation, uint32_t epoch, uint32_t slice, uint64_t from_step,
                          const std::vector<ExampleDigest>& digests) {
  const auto index = job_.worker_index(node);
  KJ_REQUIRE(index.has_value(), "this node is not a worker of the job", node, job_.id);
  if (generation != job_.generation || !job_.sync()) return;  // a stream of an abandoned plan
  KJ_REQUIRE(job_.plan.has_value(), "the job's data is not loaded yet", job_.id);
  const auto mine = job_.slices_of(*index);
  KJ_REQUIRE(std::find(mine.begin(), mine.end(), slice) != mine.end() || faults_.takeover().granted(node, slice),
             "the worker does not compute this slice", slice, node);
  KJ_REQUIRE(epoch < job_.spec.training.epochs, "epoch out of range", epoch);
  const uint64_t steps_per_epoch = job_.steps_per_epoch();
  KJ_REQUIRE(from_step <= steps_per_epoch && digests.size() <= steps_per_epoch - from_step, "step out of range", from_step);
  for (size_t i = 0; i < digests.size(); ++i) {
    job_.progress.ledger().served(epoch * steps_per_epoch + from_step + i, slice, digests[i]);
  }
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
      faults_.async_cuts().maybe_start();
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
      faults_.async_cuts().expects_no_more(node);
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
  // A session of a superseded plan is told so at once (WorkerWatches::end_all told the ones already open).
  KJ_REQUIRE(generation >= job_.generation, "re-planned: get a new assignment", generation, job_.generation);
  if (generation != job_.generation || job_.state() != JobState::kRunning) return kj::NEVER_DONE;
  auto paf = kj::newPromiseAndFulfiller<WorkerOrder>();
  job_.watches.open(node, kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

kj::Promise<void> JobRunner::paused(NodeId node, uint64_t cut, WorkerPosition position) {
  KJ_REQUIRE(job_.worker_index(node).has_value(), "this node is not a worker of the job", node, job_.id);
  return faults_.async_cuts().paused(node, cut, position);
}

}  // namespace pstrain

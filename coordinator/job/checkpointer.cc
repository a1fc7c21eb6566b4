#include "coordinator/job/checkpointer.h"

#include <algorithm>

#include "common/base/log.h"
#include "common/engine/optim/optimizer.h"
#include "common/data/model_inputs.h"
#include "common/rpc/message_limits.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {

Checkpointer::Checkpointer(JobContext& job, const EarlyStop& early_stop) : job_(job), early_stop_(early_stop) {}

Metadata Checkpointer::file_metadata(uint64_t version, bool final) const {
  const uint64_t per_epoch = job_.plan ? std::max<uint64_t>(1, job_.steps_per_epoch()) : 1;
  Metadata m = {{"format", "pstrain"},
          {"job", job_.id},
          {"name", job_.spec.name},
          {"spec", job_.spec_json},
          {"dataset", job_.spec.dataset.name},
          {"dataset_sha256", job_.prepared.train ? job_.prepared.train->sha256 : ""},
          {"dataset_examples", job_.prepared.train ? std::to_string(job_.prepared.train->size) : ""},
          {"epoch", std::to_string(version / per_epoch)},
          {"step", std::to_string(version)},
          {"final", final ? "true" : "false"}};
  if (job_.prepared.train) m.emplace_back(std::string(kInputDtypeKey), std::string(dtype_name(job_.prepared.train->dtype)));
  if (job_.prepared.preprocessing) m.emplace_back("preprocessing", fitted_to_json(*job_.prepared.preprocessing));
  if (!job_.prepared.preprocessing && job_.prepared.train && !job_.prepared.train->class_names.empty()) {
    m.emplace_back(std::string(kClassNamesKey), class_names_json(job_.prepared.train->class_names));
  }
  return m;
}

Checkpointer::~Checkpointer() {
  for (uint64_t version : waiting_) job_.store.replicas().unpin(job_.id, version);
}

void Checkpointer::on_replica(uint64_t version) {
  if (!job_.backups.replicas_whole(version, job_.servers.size())) return;
  if (final_version_ && version == *final_version_) {
    // The final one comes after the intermediate one being made (never cut short: under load it
    // can still run when the job ends) and after the newest one waiting: the intermediate run
    // starts it when it ends.
    final_ready_ = true;
    if (!capturing_) start_final();
    return;
  }
  if (job_.spec.checkpoint.keep == 0 || final_started_) return;
  if (final_version_ && version >= *final_version_) return;
  if (waiting_.empty() || waiting_.back() < version) {
    // Pinned while it waits: the ledger may drop its replicas meanwhile (a newer backup).
    ReplicaStore& replicas = job_.store.replicas();
    if (!early_stop_.enabled()) {
      for (uint64_t older : waiting_) replicas.unpin(job_.id, older);
      waiting_.clear();
    }
    waiting_.push_back(version);
    replicas.pin(job_.id, version);
  }
  if (!capturing_) capture_next();
}

void Checkpointer::capture_next() {
  if (waiting_.empty()) return;
  capturing_ = true;
  task_ = capture_waiting().eagerlyEvaluate(nullptr);
}

kj::Promise<void> Checkpointer::capture_waiting() {
  // One promise for the whole run of captures: a continuation of task_ must not assign task_
  // (that destroys the promise whose callback is running, which KJ reports and
  // AddressSanitizer's leak check caught). The final one has a promise of its own.
  if (waiting_.empty()) {
    capturing_ = false;
    if (final_ready_) start_final();
    return kj::READY_NOW;
  }
  const uint64_t version = waiting_.front();
  waiting_.pop_front();
  return capture(version, false)
      .catch_([this, version](kj::Exception&& e) {
        PSLOG(kWarning) << "job " << job_.id << ": no checkpoint at step " << version << ": "
                        << e.getDescription().cStr();
      })
      .attach(kj::defer([&replicas = job_.store.replicas(), id = job_.id, version] { replicas.unpin(id, version); }))
      .then([this] { return capture_waiting(); });
}

void Checkpointer::start_final() {
  if (final_started_) return;  // (the replicas' last parts may report whole more than once)
  final_started_ = true;
  final_task_ = capture(*final_version_, true)
                    .then(
                        [this] {
                          if (final_done_) final_done_->fulfill();
                        },
                        [this](kj::Exception&& e) {
                          const std::string note = std::string("no final checkpoint: ") + e.getDescription().cStr();
                          PSLOG(kWarning) << "job " << job_.id << ": " << note;
                          job_.store.update(job_.id, [&](JobRecord& r) { r.notes.push_back(note); });
                          if (final_done_) final_done_->fulfill();
                        })
                    .eagerlyEvaluate(nullptr);
}

kj::Promise<void> Checkpointer::capture(uint64_t version, bool final) {
  // The metrics at this point, and the replicas, read now: their reads queue ahead of any later
  // deletion of this version's replicas.
  CheckpointInfo info;
  info.step = static_cast<int64_t>(version);
  info.epoch = job_.plan ? static_cast<int64_t>(version / std::max<uint64_t>(1, job_.steps_per_epoch())) : 0;
  info.time_ms = now_ms();
  info.final = final;
  if (const auto record = job_.store.get(job_.id)) {
    info.train_loss = record->train_loss;
    info.train_accuracy = record->train_accuracy;
    info.test_loss = record->test_loss;
    info.test_accuracy = record->test_accuracy;
  }
  // The replicas stay on disk: pinned now (a later erase of this version waits for the unpin),
  // read chunk by chunk on the files' thread once every part queued so far is written, and the
  // file written there piece by piece (CheckpointFiles::assemble): the coordinator holds one
  // chunk and one piece of it at a time, whatever the model's size.
  ReplicaStore& replicas = job_.store.replicas();
  replicas.pin(job_.id, version);
  CheckpointIo io;
  io.read_chunk = [&replicas, id = job_.id, version](const ChunkInfo& c, size_t index) {
    return replicas.read_chunk({id, version, c.server}, index);
  };
  io.write_piece = [&store = job_.store, id = job_.id, step = info.step](size_t index, std::string piece) {
    store.write_checkpoint_piece(id, step, index, std::move(piece));
  };
  return replicas.written()
      .then([this, version, final, io = std::move(io)]() mutable {
        return job_.store.files().assemble(job_.layout, job_.chunks, std::move(io), file_metadata(version, final),
                                           job_.options.file_piece_bytes);
      })
      .then([this, info](StreamedFile file) mutable {
        info.bytes = file.bytes;
        job_.store.add_checkpoint(job_.id, info, file.pieces, static_cast<size_t>(job_.spec.checkpoint.keep),
                                  [this](int64_t step) { return early_stop_.keeps(step); });
        PSLOG(kInfo) << "job " << job_.id << ": " << (info.final ? "final checkpoint" : "checkpoint") << " at step "
                     << info.step << " stored (" << info.bytes << " bytes)";
      })
      .attach(kj::defer([&replicas, id = job_.id, version] { replicas.unpin(id, version); }));
}

kj::Promise<void> Checkpointer::final_checkpoint(uint64_t version) {
  final_version_ = version;  // a waiting intermediate one is made first (on_replica)
  auto paf = kj::newPromiseAndFulfiller<void>();
  final_done_ = kj::mv(paf.fulfiller);
  if (job_.backups.replicas_whole(version, job_.servers.size())) {
    on_replica(version);
  } else {
    // backupDone and the replica follow; on_replica() then makes the checkpoint.
    final_backup_ = job_.servers.backup_now(version).catch_([this](kj::Exception&& e) {
      const std::string note = std::string("no final checkpoint: the servers' final backup failed: ") +
                               e.getDescription().cStr();
      PSLOG(kWarning) << "job " << job_.id << ": " << note;
      job_.store.update(job_.id, [&](JobRecord& r) { r.notes.push_back(note); });
      if (final_done_) final_done_->fulfill();
    }).eagerlyEvaluate(nullptr);
  }
  // The servers write their final backup, send its replicas here, and the file is put together:
  // time that grows with the job's state. Allowed: server_move_timeout, and a second for every
  // 8 MB of parameters and optimizer slots (a 565M-parameter Adagrad job's 4.5 GB: 9.5 minutes,
  // where 2 cores took about 3).
  const auto slots = optim::make_optimizer(job_.spec.optimizer)->make_state(0).slots.size();
  const uint64_t state_bytes = job_.layout.total_size() * (1 + slots) * sizeof(float);
  const kj::Duration allowed = job_.options.server_move_timeout + (state_bytes >> 23) * kj::SECONDS;
  return job_.io.getTimer()
      .timeoutAfter(allowed, kj::mv(paf.promise))
      .catch_([this](kj::Exception&& e) {
        const std::string note = std::string("no final checkpoint: ") + e.getDescription().cStr();
        PSLOG(kWarning) << "job " << job_.id << ": " << note;
        job_.store.update(job_.id, [&](JobRecord& r) { r.notes.push_back(note); });
      });
}

bool Checkpointer::starts_from_file() const {
  return job_.spec.init_from.source != InitFromSpec::Source::kNone && !job_.backups.latest();
}

kj::Promise<uint64_t> Checkpointer::start_from_file() {
  const InitFromSpec& from = job_.spec.init_from;
  JobStore& store = job_.store;
  std::function<std::optional<std::string>()> read;
  std::string what;
  if (from.source == InitFromSpec::Source::kModel && store.uploads().get(from.id)) {
    read = [&store, id = from.id] { return store.uploads().file(id); };
    what = "uploaded model " + from.id;
  } else if (from.source == InitFromSpec::Source::kModel) {
    read = [&store, id = from.id] { return store.model(id); };
    what = "model " + from.id;
  } else {
    const auto source = store.get(from.id);
    KJ_REQUIRE(source.has_value(), "the job to start from does not exist", from.id);
    std::optional<int64_t> step = from.checkpoint;
    if (!step && !source->checkpoints.empty()) step = source->checkpoints.back().step;
    if (step) {
      const bool known = std::any_of(source->checkpoints.begin(), source->checkpoints.end(),
                                     [&](const CheckpointInfo& c) { return c.step == *step; });
      KJ_REQUIRE(known, "the job to start from has no checkpoint at that step", from.id, *step);
      read = [&store, id = from.id, s = *step] { return store.checkpoint_file(id, s); };
      what = "the checkpoint at step " + std::to_string(*step) + " of job " + from.id;
    } else {
      // No checkpoint (a job from before checkpoints): its model, parameters only.
      KJ_REQUIRE(source->has_model, "the job to start from has neither a checkpoint nor a model", from.id);
      read = [&store, id = from.id] { return store.model(id); };
      what = "the model of job " + from.id;
    }
  }
  const uint64_t per_epoch = job_.sync() ? job_.steps_per_epoch() : [this] {
    uint64_t n = 0;
    for (uint32_t w = 0; w < job_.workers.size(); ++w) n += static_cast<uint64_t>(job_.plan->steps_per_epoch(w));
    return n;
  }();
  return store.files()
      .starting_shards(std::move(read), job_.spec, job_.chunks, static_cast<uint32_t>(job_.servers.size()), per_epoch)
      .then([this, what](StartingShards shards) {
        const uint64_t version = shards.version;
        kj::Vector<kj::Promise<void>> adopted;
        for (size_t i = 0; i < shards.servers.size(); ++i) {
          // Also a replica, as if server i had sent it: a server lost before the job's first
          // own backup can still move to a spare.
          std::vector<std::string>& blobs = shards.servers[i];
          job_.backups.add_replica_part(version, i, 0, blobs.size(), blobs.size());
          adopted.add(job_.store.replicas().put({job_.id, version, i}, 0, blobs, blobs.size()));
          adopted.add(adopt(i, version, std::move(blobs), 0));
        }
        return kj::joinPromises(adopted.releaseAsArray())
            .then([this, version] {
              job_.store.update(job_.id, [&](JobRecord& r) { r.generation = std::max(r.generation, job_.generation + 1); });
              return job_.servers.restore(version, /*from_scratch=*/false, job_.generation + 1);
            })
            .then([this, version, what, epoch = shards.epoch] {
              ++job_.generation;
              job_.backups.add_complete(version);
              const bool resume = job_.spec.init_from.optimizer_state;
              const std::string note = "started from " + what +
                                       (resume ? ": parameters, optimizer state and step " + std::to_string(version)
                                               : ": parameters (fine-tune: a fresh optimizer, from step 0)");
              PSLOG(kInfo) << "job " << job_.id << ": " << note;
              job_.store.update(job_.id, [&](JobRecord& r) {
                r.notes.push_back(note);
                r.generation = std::max(r.generation, job_.generation);
                if (job_.sync()) r.steps_done = static_cast<int64_t>(version);
              });
              if (!job_.sync() && resume) {
                // Async positions are per worker: each goes on from the epoch after the last one
                // the checkpoint completed.
                job_.resume_positions.assign(job_.workers.size(), WorkerPosition{static_cast<uint32_t>(epoch), 0, 0});
                return uint64_t{0};
              }
              return version;
            });
      });
}

kj::Promise<void> Checkpointer::adopt(size_t index, uint64_t version, std::vector<std::string> blobs, size_t first) {
  // Parts of at most kMaxPartBytes, one call at a time (as a server move sends a replica).
  const size_t total = blobs.size();
  std::vector<std::string> part;
  size_t bytes = 0, next = first;
  while (next < total && (part.empty() || bytes + blobs[next].size() <= rpc::kMaxPartBytes)) {
    bytes += blobs[next].size();
    part.push_back(std::move(blobs[next]));
    ++next;
  }
  if (part.empty()) return kj::READY_NOW;
  auto sent = job_.servers.adopt_backup(index, version, part, first, total);
  return sent.then([this, index, version, blobs = std::move(blobs), next, total]() mutable -> kj::Promise<void> {
    if (next == total) return kj::READY_NOW;
    return adopt(index, version, std::move(blobs), next);
  });
}

}  // namespace pstrain

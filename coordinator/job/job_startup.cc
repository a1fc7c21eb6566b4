#include "coordinator/job/job_startup.h"

#include <algorithm>
#include <string>

#include "common/base/error.h"
#include "common/base/log.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"

namespace pstrain {

kj::Promise<void> JobStartup::run(std::vector<ServerMember> members) {
  job_.servers.assign(std::move(members));
  job_.store.update(job_.id, [&](JobRecord& r) { r.server_names = job_.servers.names(); });
  // The data service prepares the job's data off the event loop (splits loaded once per
  // coordinator and shared; the hold-out, class weights and a table's preprocessing per job).
  return job_.data.prepare(job_.data_recipe())
      .then([this](std::shared_ptr<const JobData> data) -> kj::Promise<void> {
        job_.take_data(*data);
        // Cancelled (or failed) while the data loaded: its nodes are free again, leave them be.
        if (job_.phase != JobPhase::kConfiguring) return kj::READY_NOW;
        // The spec was checked against the dataset table at submit; the files may still disagree.
        for (const Split* split : {job_.prepared.train.get(), job_.prepared.test.get()}) {
          try {
            check_spec_against_dataset(job_.spec, *split);
          } catch (const SpecError& e) {
            kj::throwFatalException(kj::Exception(
                kj::Exception::Type::FAILED, __FILE__, __LINE__,
                kj::str("dataset '", split->dataset, "' as loaded (", split->kind == SplitKind::kTrain ? "train" : "test",
                        " split) does not fit the job: ", e.what())));
          }
        }
        job_.plan.emplace(job_.spec, job_.prepared.train->size, job_.slices());
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

kj::Promise<void> JobStartup::configure_servers() {
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
        // After a coordinator restart, the servers may hold the job still: go on from their state,
        // once the old plan's sessions can no longer move it.
        return adoption_.old_plan_stopped().then([this] { return adopt(); }).catch_([this, from_backup](kj::Exception&& e) {
          PSLOG(kInfo) << "job " << job_.id << ": cannot take over the servers' state (" << e.getDescription().cStr()
                       << "); configuring them afresh";
          return from_backup();
        });
      })
      .then([this] {
        if (job_.phase != JobPhase::kConfiguring) return;  // a loss during configuration started a recovery
        job_.phase = JobPhase::kRunning;
        PSLOG(kInfo) << "job " << job_.id << ": servers configured; workers may start";
      });
}

kj::Promise<void> JobStartup::configure_and_resume() {
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

void JobStartup::resumed_sync(uint64_t version) {
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

kj::Promise<uint64_t> JobStartup::servers_reached() {
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

kj::Promise<void> JobStartup::resume_async() {
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

kj::Promise<void> JobStartup::resume_async_from(std::vector<uint64_t> candidates) {
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

kj::Promise<void> JobStartup::adopt() {
  return adopt_servers_state(job_).then([this](uint64_t version) {
    job_.resume_version = version;
    job_.restarted = true;
    job_.progress.ledger().clear();
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

}  // namespace pstrain

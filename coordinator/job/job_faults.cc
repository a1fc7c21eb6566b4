// JobFaults (job_faults.h): complete backups, preemption, growth, a lost node, and the choice of
// procedure (takeover, rollback, server move, re-plan) for each.
#include "coordinator/job/job_faults.h"

#include <algorithm>

#include "common/data/dataset.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/base/log.h"
#include "coordinator/job/adoption.h"

namespace pstrain {

JobFaults::JobFaults(JobContext& job, EarlyStop& early_stop, Checkpointer& checkpointer, Hooks hooks)
    : job_(job), early_stop_(early_stop), checkpointer_(checkpointer), hooks_(std::move(hooks)) {}

bool JobFaults::uses_node(NodeId node) const {
  return job_.servers.index_of(node).has_value() || job_.worker_index(node).has_value();
}

std::vector<uint64_t> JobFaults::on_backup_done(NodeId node, uint64_t version) {
  const auto index = job_.servers.index_of(node);
  if (!index || job_.state() == JobState::kSucceeded) return {};
  if (!job_.backups.on_ack(*index, version, job_.servers.size())) return job_.backups.complete();
  // The new complete backup's whole replicas make older ones useless for a move.
  for (uint64_t dropped : job_.backups.drop_superseded_replicas()) job_.store.replicas().erase(job_.id, dropped);
  PSLOG(kInfo) << "job " << job_.id << ": backup at step " << version << " complete on all " << job_.servers.size()
               << " server(s)";
  job_.store.update(job_.id, [&](JobRecord& r) { r.last_backup_step = static_cast<int64_t>(version); });
  // No rollback goes back before the oldest complete backup kept: the ledger folds what precedes it.
  if (job_.sync() && job_.plan) job_.progress.ledger().fold_before(*job_.plan, job_.backups.complete().front());
  return job_.backups.complete();
}

kj::Promise<void> JobFaults::on_replica(NodeId node, uint64_t version, size_t first, size_t total,
                                        std::vector<std::string> chunks) {
  const auto index = job_.servers.index_of(node);
  if (!index || is_finished(job_.state())) return kj::READY_NOW;
  KJ_REQUIRE(!chunks.empty() && first + chunks.size() <= total, "a replica part outside its chunks", first,
             chunks.size(), total);
  // The ledger counts the part at once: a read of the replica (a server move) queues behind its
  // write in the ReplicaStore, so it finds it.
  bool keep = true;
  for (uint64_t dropped : job_.backups.add_replica_part(version, *index, first, chunks.size(), total)) {
    job_.store.replicas().erase(job_.id, dropped);
    keep = keep && dropped != version;
  }
  // A late part of a replica that a newer whole one already replaces: not worth the disk.
  if (!keep) return kj::READY_NOW;
  // The reply waits for the disk: a server sends its next part only then, so the coordinator
  // holds at most one part per server.
  return job_.store.replicas().put({job_.id, version, *index}, first, std::move(chunks), total).then([this, version] {
    checkpointer_.on_replica(version);
  });
}

kj::Promise<void> JobFaults::preempt(NodeId node) {
  if (!uses_node(node)) return kj::READY_NOW;
  PSLOG(kInfo) << "job " << job_.id << ": node " << node << " is being preempted";
  job_.preempted.insert(node);
  return sync_cut_.cut();
}

void JobFaults::grow() {
  if (!job_.sync()) {
    async_cuts_.replace_lost_workers();
    return;
  }
  if (job_.phase != JobPhase::kRunning || job_.workers.size() >= static_cast<size_t>(job_.spec.training.workers) ||
      job_.cluster.free_nodes(proto::Role::WORKER).empty()) {
    return;
  }
  // A worker is free and the job runs short of workers: cut at the next step (backup and hold,
  // as for a preemption) and re-plan from that very step with one more worker. Nothing is
  // replayed.
  PSLOG(kInfo) << "job " << job_.id << ": a free worker can join; re-planning at the next step";
  grow_ = sync_cut_.cut()
              .then([this] { recover("a worker joins"); })
              .eagerlyEvaluate([this](kj::Exception&& e) {
                PSLOG(kWarning) << "job " << job_.id << ": could not add a worker: " << e.getDescription().cStr();
              });
}

void JobFaults::on_node_lost(NodeId node, const std::string& why) {
  if (job_.state() != JobState::kRunning && job_.state() != JobState::kRecovering) return;
  if (uses_node(node)) {
    // The record lists the nodes working for the job: a lost one leaves it now (an event says
    // so at once, while the procedure below runs); a re-plan records the new set.
    job_.store.update(job_.id, [&](JobRecord& r) {
      std::erase(r.workers, node.value());
      std::erase(r.servers, node.value());
    });
  }
  const auto worker = job_.worker_index(node);
  if (worker && !job_.sync()) {
    // Async: the others simply go on; the lost worker's shard of the epoch is not redone.
    WorkerProgress& w = job_.progress.workers()[*worker];
    w.finished = true;
    w.lost = true;
    async_cuts_.expects_no_more(node);
    PSLOG(kWarning) << "job " << job_.id << ": worker " << *worker << " lost (" << why
                    << "); the others go on, and a free worker takes its place";
    job_.servers.worker_finished(static_cast<uint32_t>(*worker));
    hooks_.finish_if_done();
    return;
  }
  // A preempted worker left after a cut (servers hold at a backup): rolling back to it loses
  // nothing, and a takeover could not pass the hold.
  if (worker && job_.preempted.count(node) == 0 && try_take_over(*worker, why)) return;
  recover(why);
}

bool JobFaults::try_take_over(size_t lost, const std::string& why) {
  if (!takeover_.possible(lost)) return false;
  job_.phase = JobPhase::kTakingOver;
  job_.store.update(job_.id, [&](JobRecord& r) { r.reason = why; });
  // recover() does not destroy this promise (it may be running this very callback); a rollback
  // that starts meanwhile bumps the generation, and the takeover's later steps then stand down.
  const uint64_t generation = job_.generation;
  takeover_task_ = takeover_.run(lost)
                       .then([this, lost, why, generation](uint64_t version) {
                         if (generation != job_.generation || job_.phase != JobPhase::kTakingOver) return;
                         std::vector<NodeId> alive;
                         for (size_t i = 0; i < job_.workers.size(); ++i) {
                           if (i != lost && job_.alive(job_.workers[i])) alive.push_back(job_.workers[i]);
                         }
                         if (alive.empty()) {
                           recover(why);
                           return;
                         }
                         // An epoch whose evaluation the lost worker did not report: record what
                         // the others did. (Epochs before the one of the taken-over step: the
                         // survivors evaluated those before they pushed that step.)
                         job_.progress.record_partial_epochs(static_cast<uint32_t>((version - 1) / job_.steps_per_epoch()));
                         if (is_finished(job_.state())) return;  // the divergence guard failed it
                         replan(alive, version, 0,
                                "worker " + std::to_string(lost) + "'s slice of step " + std::to_string(version - 1) +
                                    " taken over, going on from step " + std::to_string(version));
                       })
                       .eagerlyEvaluate([this, why, generation](kj::Exception&& e) {
                         if (generation != job_.generation) return;  // superseded by a rollback
                         PSLOG(kWarning) << "job " << job_.id << ": takeover failed (" << e.getDescription().cStr()
                                         << "); rolling back";
                         recover(why);
                       });
  return true;
}

void JobFaults::recover(const std::string& why) {
  if (job_.state() != JobState::kRunning && job_.state() != JobState::kRecovering) return;
  // Stopped early: nothing more is trained; the model comes from a checkpoint already taken.
  if (early_stop_.stopping()) return;
  // A rollback supersedes a takeover or a cut in progress. Their promises stay (this may run
  // inside one of their callbacks); the generation bump below makes a takeover stand down, and a
  // cut's paused workers are sent away rather than on (AsyncCuts::abandon).
  async_cuts_.abandon(why);
  ++job_.generation;  // every session of the old plan is stale from now on
  job_.watches.end_all(why);  // and told so, in case it waits on a server that will never answer
  if (job_.phase == JobPhase::kRecovering) return;  // the running recovery picks up the new losses
  job_.phase = JobPhase::kRecovering;
  job_.store.update(job_.id, [&](JobRecord& r) {
    r.state = job_.state();
    r.reason = why;
  });
  PSLOG(kWarning) << "job " << job_.id << ": RECOVERING (" << why << ")";
  recovery_ = rollback_.run()
                  .then([this](Rollback::Outcome outcome) {
                    // Metrics of the epochs being redone start over.
                    const size_t first_epoch = job_.sync() ? static_cast<size_t>(outcome.version / job_.steps_per_epoch())
                                                           : async_cuts_.resume(outcome.workers, outcome.version);
                    job_.progress.restart_epochs_from(first_epoch);
                    hooks_.epochs_restart_from(static_cast<uint32_t>(first_epoch));
                    replan(std::move(outcome.workers), outcome.version, outcome.replayed,
                           "rolled back to step " + std::to_string(outcome.version));
                  })
                  .eagerlyEvaluate([this](kj::Exception&& e) {
                    hooks_.fail(std::string("recovery failed: ") + e.getDescription().cStr());
                  });
}

void JobFaults::replan(std::vector<NodeId> workers, uint64_t version, uint64_t replayed, const std::string& how) {
  job_.workers = std::move(workers);
  job_.progress.reset_workers(job_.workers.size(), version);
  if (!job_.sync()) {
    for (size_t i = 0; i < job_.workers.size() && i < job_.resume_positions.size(); ++i) {
      job_.progress.workers()[i].steps = job_.resume_positions[i].steps_done;
    }
  }
  job_.plan.emplace(job_.spec, job_.prepared.train->size, job_.slices());
  job_.resume_version = version;
  job_.progress.ledger().forget_from(version);
  // Acks and replicas of backups past `version` are of the abandoned timeline (the servers
  // deleted those backups when they restored).
  for (uint64_t dropped : job_.backups.forget_after(version)) job_.store.replicas().erase(job_.id, dropped);
  job_.watches.end_all("the job runs again on a new plan");
  ++job_.recoveries;
  ++job_.generation;
  job_.phase = JobPhase::kRunning;
  PSLOG(kInfo) << "job " << job_.id << ": RUNNING again from step " << version << " with " << job_.workers.size()
               << " worker(s); " << replayed << " step(s) to replay";
  job_.store.update(job_.id, [&](JobRecord& r) {
    r.state = job_.state();
    r.notes.push_back("recovered (" + r.reason + "): " + how + ", " + std::to_string(replayed) + " step(s) replayed");
    r.reason.clear();
    r.workers = node_numbers(job_.workers);
    r.generation = std::max(r.generation, job_.generation);
    r.servers = node_numbers(job_.servers.nodes());
    r.steps_done = static_cast<int64_t>(version);
    r.recoveries = job_.recoveries;
    r.replayed_steps.push_back(static_cast<int64_t>(replayed));
  });
}

}  // namespace pstrain

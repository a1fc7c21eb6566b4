// Takeover: the answer to a lost worker in sync mode (docs/DESIGN-NOTES.md "Worker loss"): the job
// goes on from the next step, nothing rolled back.
//
// When a worker dies during step s, the chunks whose pushes for s were all in are at s + 1, the
// others wait at s for the lost worker's slice (its open pushes were cancelled with its
// connection). A survivor still holds the parameters of version s (it swaps in the new values only
// once its whole step is in), so it can compute the lost slice of step s and push it in the lost
// worker's name: the step completes with exactly the sum an uninterrupted run would have applied
// (pushes already applied make the substitute a dropped late push). Meanwhile every server holds
// at s + 1 (`settle`); once all chunks are there, the pushes waiting beyond are failed, the
// workers ask for the new plan, and the job re-plans from s + 1 with one worker fewer but the same
// slices: a survivor computes the lost worker's slice as an extra at every step (until a free
// worker joins), so the run goes on summing the same slices in the same order and ends bit for bit
// as the uninterrupted one. Every example is still used once per epoch, and no step is replayed.
//
// When that cannot work (backup workers, no survivor with an open watch, a chunk already past
// s + 1, JobOptions::takeover_timeout), the job falls back to the rollback of job_recovery.cc.
#include "coordinator/job/takeover.h"

#include <algorithm>
#include <limits>

#include "common/base/log.h"

namespace pstrain {

Takeover::Takeover(JobContext& job) : job_(job) {}

bool Takeover::possible(size_t lost) const {
  if (job_.phase != JobPhase::kRunning || job_.spec.training.backup_workers > 0 || job_.workers.size() < 2) return false;
  // One slice per order: a worker that also computed extra slices is rolled back instead.
  if (job_.slices_of(lost).size() != 1) return false;
  for (size_t i = 0; i < job_.workers.size(); ++i) {
    if (i != lost && job_.can_order(job_.workers[i])) return true;
  }
  return false;
}

kj::Promise<uint64_t> Takeover::run(size_t lost) {
  // Where are the chunks? The lowest version is the step the lost worker left unfinished.
  const uint64_t generation = job_.generation;
  return job_.servers.versions().then([this, lost, generation](kj::Array<ServerVersions> versions) {
    KJ_REQUIRE(generation == job_.generation, "superseded by a rollback");
    uint64_t lowest = std::numeric_limits<uint64_t>::max(), highest = 0;
    for (const auto& v : versions) {
      lowest = std::min(lowest, v.lowest);
      highest = std::max(highest, v.highest);
    }
    const uint64_t steps_per_epoch = job_.steps_per_epoch();
    const uint64_t total = steps_per_epoch * static_cast<uint64_t>(job_.spec.training.epochs);
    KJ_REQUIRE(lowest < total, "the lost worker had finished its steps");
    KJ_REQUIRE(highest <= lowest + 1, "chunks are more than one step apart", lowest, highest);
    WorkerOrder order;
    order.step = lowest;
    order.slice = static_cast<uint32_t>(lost);
    order.slice_count = job_.slices();
    // The survivor reads the slice's examples of the step from a data stream, as its own; the
    // ledger has them now (the stream records them again, the same).
    job_.progress.ledger().served(lowest, order.slice,
                         job_.plan->batch(static_cast<uint32_t>(lowest / steps_per_epoch),
                                          static_cast<int64_t>(lowest % steps_per_epoch), order.slice),
                         /*streamed=*/false);
    // The first live survivor with an open watch computes the slice.
    bool ordered = false;
    for (size_t i = 0; i < job_.workers.size() && !ordered; ++i) {
      const NodeId node = job_.workers[i];
      if (i == lost || !job_.can_order(node)) continue;
      PSLOG(kInfo) << "job " << job_.id << ": worker " << i << " takes over worker " << lost << "'s slice of step "
                   << lowest;
      grant_ = Grant{node, order.slice, job_.generation};
      job_.watches.order(node, kj::mv(order));
      ordered = true;
    }
    KJ_REQUIRE(ordered, "no surviving worker to take the slice over");
    // Every server holds at the next step; when all chunks are there, the job re-plans from it
    // (with the generation the re-plan gives, recorded first for a coordinator restarted later).
    job_.store.update(job_.id, [&](JobRecord& r) { r.generation = std::max(r.generation, job_.generation + 1); });
    return job_.io.getTimer()
        .timeoutAfter(job_.options.takeover_timeout, job_.servers.settle(lowest + 1, job_.generation + 1))
        .then([next = lowest + 1] { return next; });
  });
}

}  // namespace pstrain

// Adoption. Workers' sessions end at step boundaries when the coordinator goes (their data stream
// or report fails between steps), so a sync job's chunks all stand at one step v: the workers'
// new plan starts there and nothing is replayed. Pushes of the old plan still waiting at the
// servers are failed and fenced off by a settle at v, and any cut hold the old coordinator left
// is lifted after it (lifted first, the hold could let an old step apply).
#include "coordinator/job/adoption.h"

namespace pstrain {

kj::Promise<uint64_t> adopt_servers_state(JobContext& job) {
  return job.servers.versions().then([&job](kj::Array<ServerVersions> versions) {
    const uint64_t version = versions[0].lowest;
    for (const auto& v : versions) {
      KJ_REQUIRE(v.lowest == version && v.highest == version, "the servers' chunks are not at one step", v.lowest,
                 v.highest, version);
    }
    return job.servers.settle_and_release(version, job.generation).then([version] { return version; });
  });
}

}  // namespace pstrain

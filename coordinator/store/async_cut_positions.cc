#include "coordinator/store/async_cut_positions.h"

#include <charconv>

#include "common/base/cross_thread.h"
#include "coordinator/store/job_codec.h"

namespace pstrain {
namespace {

std::string cut_key(const std::string& job, uint64_t version) { return "job/" + job + "/cut/" + key_number(version, 12); }

}  // namespace

kj::Promise<void> AsyncCutPositions::set(const std::string& job, Cuts& cuts, uint64_t version,
                                         std::vector<WorkerPosition> positions, const std::vector<uint64_t>& dropped) {
  std::vector<KvStore::Write> writes;
  writes.push_back({cut_key(job, version), positions_to_json(positions)});
  cuts[version] = std::move(positions);
  for (uint64_t v : dropped) {
    if (cuts.erase(v) != 0) writes.push_back({cut_key(job, v), std::nullopt});
  }
  auto paf = make_cross_thread_paf<void>();
  writer_.enqueue(std::move(writes), /*sync=*/false, [fulfiller = paf.fulfiller] { fulfiller->fulfill(); });
  return kj::mv(paf.promise);
}

void AsyncCutPositions::erase_all(const std::string& job, Cuts& cuts) {
  std::vector<KvStore::Write> writes;
  for (const auto& [v, positions] : cuts) writes.push_back({cut_key(job, v), std::nullopt});
  cuts.clear();
  if (!writes.empty()) writer_.enqueue(std::move(writes), false);
}

std::optional<uint64_t> AsyncCutPositions::version_of(const std::string& kind) {
  if (!kind.starts_with("cut/")) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(kind.data() + 4, kind.data() + kind.size(), v);
  if (ec != std::errc() || end != kind.data() + kind.size()) return std::nullopt;
  return v;
}

}  // namespace pstrain

#include "coordinator/job/plateau_rate.h"

#include <vector>

#include "common/base/log.h"
#include "common/data/reduce_on_plateau.h"
#include "coordinator/job/early_stop.h"

namespace pstrain {

std::optional<float> PlateauRate::known_scale(uint32_t epoch) const {
  if (!enabled() || epoch == 0) return 1.0f;
  const std::optional<JobRecord> record = job_.store.get(job_.id);
  if (!record) return std::nullopt;
  std::vector<bool> seen;
  std::vector<std::optional<double>> values = recorded_figures(*record, job_.spec.reduce_on_plateau.monitor, seen);
  if (seen.size() < epoch || !seen[epoch - 1]) return std::nullopt;
  values.resize(epoch);
  return plateau_lr_scales(job_.spec.reduce_on_plateau, job_.spec.optimizer.learning_rate, values).back();
}

float PlateauRate::answer(uint32_t epoch, float scale) {
  if (scale != logged_) {
    logged_ = scale;
    PSLOG(kInfo) << "job " << job_.id << ": reduce_on_plateau: epoch " << epoch + 1 << " trains with learning rate "
                 << job_.spec.optimizer.learning_rate * scale;
  }
  return scale;
}

kj::Promise<float> PlateauRate::scale_for(uint32_t epoch) {
  if (const std::optional<float> scale = known_scale(epoch)) return answer(epoch, *scale);
  if (released_) return logged_;
  auto paf = kj::newPromiseAndFulfiller<float>();
  waiting_.emplace(epoch, kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void PlateauRate::epoch_recorded() {
  if (!enabled()) return;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const std::optional<float> scale = known_scale(it->first);
    if (!scale) {
      ++it;
      continue;
    }
    it->second->fulfill(answer(it->first, *scale));
    it = waiting_.erase(it);
  }
}

void PlateauRate::release_all() {
  released_ = true;
  for (auto& [epoch, fulfiller] : waiting_) fulfiller->fulfill(float{logged_});
  waiting_.clear();
}

}  // namespace pstrain

#include "coordinator/kj_commands.h"

#include "common/base/log.h"

namespace pstrain {

std::string KjJobCommands::submit(JobSpec spec) {
  std::string id = executor_.executeSync([this, &spec] {
    const std::string id = jobs_.submit(std::move(spec));
    PSLOG(kInfo) << "job " << id << " submitted over HTTP";
    after_change_();
    return id;
  });
  store_.flush();  // answered once the job is durable (off the event loop)
  return id;
}

JobCommands::CancelResult KjJobCommands::cancel(const std::string& id) {
  const CancelResult result = executor_.executeSync([this, &id] {
    JobRunner* job = jobs_.find(id);
    if (job == nullptr) {
      // Jobs that ended before a coordinator restart have a record but no runner.
      const auto record = store_.get(id);
      if (!record) return CancelResult::kNotFound;
      return record->finished() ? CancelResult::kAlreadyFinished : CancelResult::kNotFound;
    }
    const auto outcome = job->cancel();
    after_change_();
    if (outcome == JobRunner::CancelOutcome::kAlreadyFinished) return CancelResult::kAlreadyFinished;
    PSLOG(kInfo) << "job " << id << " cancelled over HTTP";
    return CancelResult::kCancelled;
  });
  store_.flush();  // answered once the cancellation is durable (off the event loop)
  return result;
}

std::string KjStudyCommands::submit(StudySpec spec) {
  std::string id = executor_.executeSync([this, &spec] {
    const std::string id = studies_.create(std::move(spec));
    PSLOG(kInfo) << "study " << id << " submitted over HTTP";
    after_change_();
    return id;
  });
  store_.flush();
  jobs_.flush();
  return id;
}

StudyCommands::CancelResult KjStudyCommands::cancel(const std::string& id) {
  const auto result = executor_.executeSync([this, &id] {
    const auto r = studies_.cancel(id);
    after_change_();
    return r;
  });
  store_.flush();
  jobs_.flush();
  switch (result) {
    case StudyManager::CancelResult::kCancelled: return CancelResult::kCancelled;
    case StudyManager::CancelResult::kNotFound: return CancelResult::kNotFound;
    case StudyManager::CancelResult::kAlreadyFinished: return CancelResult::kAlreadyFinished;
  }
  return CancelResult::kNotFound;
}

}  // namespace pstrain

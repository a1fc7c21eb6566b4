// The one bridge between the HTTP thread (Asio) and the coordinator's event loop (KJ): REST
// commands run on the event-loop thread through its kj::Executor, so nothing on the HTTP thread
// touches Cap'n Proto objects or the job runners.
//
// Thread rules: submit() and cancel() are called on the HTTP thread and block it until the event
// loop has run the command (a short, non-blocking piece of work there), and then until the
// JobStore's writer has made the change durable, so a 201 or 200 is never taken back by a crash.
#pragma once

#include <kj/async.h>

#include <functional>

#include "coordinator/http/rest_api.h"
#include "coordinator/job/job_manager.h"
#include "coordinator/study/study_manager.h"

namespace pstrain {

class KjJobCommands final : public JobCommands {
 public:
  // `after_change` runs on the event loop after each command (start what can start, wake workers).
  KjJobCommands(const kj::Executor& executor, JobManager& jobs, JobStore& store, std::function<void()> after_change)
      : executor_(executor), jobs_(jobs), store_(store), after_change_(std::move(after_change)) {}

  std::string submit(JobSpec spec) override;
  CancelResult cancel(const std::string& id) override;

 private:
  const kj::Executor& executor_;
  JobManager& jobs_;
  JobStore& store_;
  std::function<void()> after_change_;
};

// The same bridge for studies: create and cancel run on the event loop (StudyManager), answered
// once the study store (and the cancelled jobs) are durable.
class KjStudyCommands final : public StudyCommands {
 public:
  KjStudyCommands(const kj::Executor& executor, StudyManager& studies, StudyStore& store, JobStore& jobs,
                  std::function<void()> after_change)
      : executor_(executor), studies_(studies), store_(store), jobs_(jobs), after_change_(std::move(after_change)) {}

  std::string submit(StudySpec spec) override;
  CancelResult cancel(const std::string& id) override;

 private:
  const kj::Executor& executor_;
  StudyManager& studies_;
  StudyStore& store_;
  JobStore& jobs_;
  std::function<void()> after_change_;
};

}  // namespace pstrain

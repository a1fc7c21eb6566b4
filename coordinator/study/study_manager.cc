#include "coordinator/study/study_manager.h"

#include <algorithm>
#include <boost/json.hpp>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/log.h"
#include "common/data/job_spec.h"

namespace pstrain {
namespace json = boost::json;
namespace {

bool is_asha(const StudyRecord& s) { return s.spec.algorithm == StudyAlgorithm::kAsha; }

// A grid or random trial's epochs: its job spec's training.epochs.
int64_t trial_epochs(const StudyRecord& s, int64_t number) {
  try {
    return parse_job_spec(trial_job_spec(s.spec, trial_values(s.spec, number), number)).training.epochs;
  } catch (const SpecError&) {
    return 0;
  }
}

// The study's metric in an epoch's figures (nullopt: the job does not have it).
std::optional<double> figure(const EpochMetric& m, const std::string& name) {
  if (name == "train_loss") return m.train_loss;
  if (name == "train_accuracy") return m.test_mae ? std::nullopt : std::optional<double>(m.train_accuracy);
  if (name == "test_loss") return m.test_loss;
  if (name == "test_accuracy") return m.test_mae ? std::nullopt : std::optional<double>(m.test_accuracy);
  if (name == "test_mae") return m.test_mae;
  if (name == "test_rmse") return m.test_rmse;
  if (name == "test_r2") return m.test_r2;
  if (name == "test_top5_accuracy") return m.test_top5_accuracy;
  if (name == "test_auc") return m.test_auc;
  if (name == "val_loss") return m.val_loss;
  if (name == "val_accuracy") return m.val_accuracy;
  if (name == "val_mae") return m.val_mae;
  if (name == "val_rmse") return m.val_rmse;
  if (name == "val_r2") return m.val_r2;
  if (name == "val_top5_accuracy") return m.val_top5_accuracy;
  if (name == "val_auc") return m.val_auc;
  return std::nullopt;
}

TrialRecord new_trial(size_t number) {
  TrialRecord t;
  t.number = static_cast<int64_t>(number);
  return t;
}

bool active(const TrialRecord& t) { return t.state == TrialState::kPending || t.state == TrialState::kRunning; }

// What a study's record says, less the running seconds (which change every tick and are not
// worth a synced write each).
std::string decisions(StudyRecord s) {
  for (auto& t : s.trials) t.node_seconds = t.worker_seconds = 0;
  return study_to_json(s);
}

}  // namespace

std::string trial_job_id(const std::string& study, int64_t number, int rung) {
  std::string id = study + "-t" + std::to_string(number);
  if (rung >= 0) id += "-r" + std::to_string(rung);
  return id;
}

StudyManager::StudyManager(JobManager& jobs, JobStore& job_store, StudyStore& store)
    : jobs_(jobs), job_store_(job_store), store_(store) {}

void StudyManager::load() {
  for (StudyRecord study : store_.load()) {
    next_id_ = std::max<uint64_t>(next_id_, std::stoull(study.id.substr(study.id.rfind('-') + 1)) + 1);
    if (study.finished()) continue;
    adopt_jobs(study);
    store_.update(study.id, [&](StudyRecord& r) { r = study; });
    PSLOG(kInfo) << "study " << study.id << " goes on after a restart (" << study.trials.size() << " trials so far)";
  }
}

void StudyManager::adopt_jobs(StudyRecord& study) {
  const std::string prefix = study.id + "-t";
  struct Found {
    int64_t number;
    int rung;
    std::string id;
  };
  std::vector<Found> found;
  for (const JobRecord& job : job_store_.list()) {
    if (job.id.rfind(prefix, 0) != 0) continue;
    const std::string rest = job.id.substr(prefix.size());
    const auto r = rest.find("-r");
    try {
      found.push_back({std::stoll(rest.substr(0, r)), r == std::string::npos ? 0 : std::stoi(rest.substr(r + 2)), job.id});
    } catch (const std::exception&) {
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.number != b.number ? a.number < b.number : a.rung < b.rung;
  });
  const auto rungs = asha_rungs(study.spec.asha);
  for (const Found& f : found) {
    while (static_cast<int64_t>(study.trials.size()) <= f.number) {
      study.trials.push_back(new_trial(study.trials.size()));
    }
    TrialRecord& t = study.trials[static_cast<size_t>(f.number)];
    if (static_cast<size_t>(f.rung) != t.rungs.size()) continue;  // known already
    t.rungs.push_back(
        {is_asha(study) ? rungs[std::min<size_t>(f.rung, rungs.size() - 1)] : trial_epochs(study, f.number), f.id, std::nullopt});
    t.state = TrialState::kPending;  // refresh() reads the job's state
    PSLOG(kInfo) << "study " << study.id << " adopted job " << f.id;
  }
}

std::string StudyManager::create(StudySpec spec) {
  StudyRecord study;
  do {
    study.id = "study-" + std::to_string(next_id_++);
  } while (store_.get(study.id).has_value());
  study.spec = std::move(spec);
  study.created_ms = now_ms();
  const std::string id = study.id;
  store_.add(std::move(study));
  return id;
}

StudyManager::CancelResult StudyManager::cancel(const std::string& id) {
  auto study = store_.get(id);
  if (!study) return CancelResult::kNotFound;
  if (study->finished()) return CancelResult::kAlreadyFinished;
  refresh(*study);
  for (auto& t : study->trials) {
    if (t.finished()) continue;
    if (active(t)) {
      if (JobRunner* job = jobs_.find(t.rungs.back().job)) job->cancel();
      t.state = TrialState::kCancelled;
    } else {
      t.state = TrialState::kStopped;
    }
    t.reason = "the study was cancelled";
  }
  study->state = StudyState::kCancelled;
  study->reason = "cancelled";
  study->finished_ms = now_ms();
  store_.update(id, [&](StudyRecord& r) { r = *study; });
  PSLOG(kInfo) << "study " << id << " cancelled";
  return CancelResult::kCancelled;
}

bool StudyManager::tick() {
  bool changed = false;
  for (const StudyRecord& stored : store_.list()) {
    if (stored.finished()) continue;
    StudyRecord study = stored;
    refresh(study);
    changed = advance(study) || changed;
    const bool decided = decisions(study) != decisions(stored);
    store_.update(study.id, [&](StudyRecord& r) { r = study; }, decided);
  }
  return changed;
}

void StudyManager::refresh(StudyRecord& study) const {
  const int64_t now = now_ms();
  const auto rungs = asha_rungs(study.spec.asha);
  for (auto& t : study.trials) {
    if (t.finished() || t.state == TrialState::kPaused || t.rungs.empty()) continue;
    TrialRung& last = t.rungs.back();
    const auto job = job_store_.get(last.job);
    if (!job) continue;  // advance() queues it again
    // Seconds: the finished rungs' (kept) plus this one's so far.
    double node = 0, worker = 0;
    if (job->started_ms > 0) {
      const double seconds = static_cast<double>((job->finished_ms > 0 ? job->finished_ms : now) - job->started_ms) / 1000.0;
      node = seconds * static_cast<double>(job->workers.size() + job->servers.size());
      worker = seconds * static_cast<double>(job->workers.size());
    }
    t.node_seconds = last.node_seconds_before + node;
    t.worker_seconds = last.worker_seconds_before + worker;
    switch (job->state) {
      case JobState::kPending: t.state = TrialState::kPending; break;
      case JobState::kRunning:
      case JobState::kRecovering: t.state = TrialState::kRunning; break;
      case JobState::kSucceeded: {
        const auto m = job->epoch_history.empty() ? std::nullopt : figure(job->epoch_history.back(), study.spec.metric);
        if (!m) {
          t.state = TrialState::kFailed;
          t.reason = "job " + last.job + " has no " + study.spec.metric;
          break;
        }
        last.metric = *m;
        t.state = is_asha(study) && t.rungs.size() < rungs.size() ? TrialState::kPaused : TrialState::kCompleted;
        break;
      }
      case JobState::kFailed:
        t.state = TrialState::kFailed;
        t.reason = "job " + last.job + " failed: " + job->reason;
        break;
      case JobState::kCancelled:
        t.state = TrialState::kCancelled;
        t.reason = "job " + last.job + " was cancelled";
        break;
    }
  }
}

std::optional<size_t> StudyManager::promotion(const StudyRecord& study) const {
  const auto rungs = asha_rungs(study.spec.asha);
  const int64_t factor = study.spec.asha.reduction_factor;
  for (size_t k = rungs.size() - 1; k-- > 0;) {
    std::vector<size_t> members;
    for (size_t i = 0; i < study.trials.size(); ++i) {
      const auto& t = study.trials[i];
      if (t.rungs.size() > k && t.rungs[k].metric) members.push_back(i);
    }
    const size_t top = members.size() / static_cast<size_t>(factor);
    std::stable_sort(members.begin(), members.end(), [&](size_t a, size_t b) {
      const double ma = *study.trials[a].rungs[k].metric, mb = *study.trials[b].rungs[k].metric;
      return study.spec.maximize ? ma > mb : ma < mb;
    });
    for (size_t j = 0; j < top; ++j) {
      const auto& t = study.trials[members[j]];
      if (t.state == TrialState::kPaused && t.rungs.size() == k + 1) return members[j];
    }
  }
  return std::nullopt;
}

bool StudyManager::advance(StudyRecord& study) {
  bool queued = false;
  // A job the study named but no store holds (queued just before a crash): queue it again.
  for (auto& t : study.trials) {
    if (active(t) && !t.rungs.empty() && !job_store_.get(t.rungs.back().job) && !jobs_.find(t.rungs.back().job)) {
      queue_rung(study, t, t.rungs.size() - 1);
      queued = true;
    }
  }
  auto running = std::count_if(study.trials.begin(), study.trials.end(), active);
  while (running < study.spec.max_concurrent_trials) {
    std::optional<size_t> next = is_asha(study) ? promotion(study) : std::nullopt;
    if (next) {
      queue_rung(study, study.trials[*next], study.trials[*next].rungs.size());
    } else if (static_cast<int64_t>(study.trials.size()) < study.spec.max_trials) {
      study.trials.push_back(new_trial(study.trials.size()));
      queue_rung(study, study.trials.back(), 0);
    } else {
      break;
    }
    queued = true;
    ++running;
  }
  if (running == 0) finish(study);
  return queued;
}

void StudyManager::queue_rung(StudyRecord& study, TrialRecord& trial, size_t rung) {
  const bool asha = is_asha(study);
  const auto rungs = asha_rungs(study.spec.asha);
  const std::string id = trial_job_id(study.id, trial.number, asha ? static_cast<int>(rung) : -1);
  if (rung == trial.rungs.size()) {
    trial.rungs.push_back({asha ? rungs[rung] : trial_epochs(study, trial.number), id, std::nullopt, trial.node_seconds,
                           trial.worker_seconds});
  }
  trial.state = TrialState::kPending;
  if (job_store_.get(id) || jobs_.find(id)) return;  // it exists: adopted
  try {
    json::value spec = parse_json(trial_job_spec(study.spec, trial_values(study.spec, trial.number), trial.number,
                                                  asha ? rungs[rung] : 0));
    if (rung > 0) {
      spec.as_object()["init_from"] =
          json::object{{"job", trial.rungs[rung - 1].job}, {"checkpoint", "latest"}, {"optimizer_state", true}};
    }
    jobs_.submit(parse_job_spec(json::serialize(spec)), id, JobOrigin{study.id, trial.number});
    PSLOG(kInfo) << "study " << study.id << ": trial " << trial.number << " queued as job " << id;
  } catch (const SpecError& e) {
    trial.state = TrialState::kFailed;
    trial.reason = std::string("its job spec is invalid: ") + e.what();
  }
}

void StudyManager::finish(StudyRecord& study) {
  const int64_t factor = study.spec.asha.reduction_factor;
  bool any = false;
  for (auto& t : study.trials) {
    if (t.state == TrialState::kPaused) {
      t.state = TrialState::kStopped;
      const int64_t epochs = t.rungs.back().epochs;
      t.reason = "not in the top 1/" + std::to_string(factor) + " of its rung (" + std::to_string(epochs) +
                 (epochs == 1 ? " epoch)" : " epochs)");
    }
    any = any || (!t.rungs.empty() && t.rungs.back().metric);
  }
  study.state = any ? StudyState::kSucceeded : StudyState::kFailed;
  if (!any) study.reason = "no trial finished with a " + study.spec.metric;
  study.finished_ms = now_ms();
  PSLOG(kInfo) << "study " << study.id << " " << study_state_name(study.state);
}

}  // namespace pstrain

// The REST views of studies (docs/REST.md "Studies"): GET /v1/studies/{id} (the study, each
// trial's parameters, figures per rung and per epoch, seconds, and the best trial with its
// model) and GET /v1/studies (one summary per study).
//
// Thread rules: pure functions over copies; any thread (the HTTP thread calls them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "coordinator/store/job_store.h"
#include "coordinator/study/study_store.h"

namespace pstrain {

// The best trial: among the trials with the study's metric at the most epochs any trial reached,
// the best figure (ties: the lower number). nullopt: none has one yet.
std::optional<size_t> best_trial(const StudyRecord& study);

// The full view; `jobs` gives each trial's epochs (its jobs' epoch histories).
std::string study_view_json(const StudyRecord& study, const JobStore& jobs);
std::string study_list_json(const std::vector<StudyRecord>& studies);

}  // namespace pstrain

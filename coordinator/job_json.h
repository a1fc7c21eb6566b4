// JSON forms of the job records and node views: what the REST API returns and what JobStore
// persists. Boost.JSON stays inside job_json.cc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "coordinator/job_store.h"

namespace pstrain {

// Full status of one job (GET /v1/jobs/{id}); `nodes` supplies worker/server addresses and
// heartbeats.
std::string job_status_json(const JobRecord& job, const std::vector<NodeView>& nodes);
// One line per job (GET /v1/jobs).
std::string job_list_json(const std::vector<JobRecord>& jobs);
// Metric history (GET /v1/jobs/{id}/metrics).
std::string job_metrics_json(const JobRecord& job);
// The cluster view (GET /v1/cluster).
std::string cluster_json(const std::vector<NodeView>& nodes);

// A trained model (GET /v1/models/{id}): its job's id, name, dataset, input shape, classes, bytes,
// when it was made and its final test accuracy. The list (GET /v1/models): every job with a model.
// A model: a trained one (a job that SUCCEEDED, "source": "job") or an uploaded one ("upload").
std::string model_json(const JobRecord& job);
std::string uploaded_model_json(const UploadedModel& model);
// Trained models (the jobs with one) then uploaded ones.
std::string model_list_json(const std::vector<JobRecord>& jobs, const std::vector<UploadedModel>& uploads);

// A job's checkpoints (GET /v1/jobs/{id}/checkpoints): step, epoch, time, bytes, whether final,
// the metrics at that point, and each one's href.
std::string checkpoint_list_json(const JobRecord& job);

// The ids of unfinished jobs whose spec names `dataset` (a dataset in use cannot be deleted).
std::vector<std::string> jobs_using_dataset(const JobStore& store, const std::string& dataset);

// Storage forms (everything but the metric history, which is stored entry by entry).
std::string record_to_json(const JobRecord& job);
std::optional<JobRecord> record_from_json(const std::string& text);
std::string step_to_json(const StepMetric& m);
std::optional<StepMetric> step_from_json(const std::string& text);
std::string epoch_to_json(const EpochMetric& m);
std::optional<EpochMetric> epoch_from_json(const std::string& text);
// An async cut's worker positions: [[epoch, step, steps_done], ...] by worker index.
std::string positions_to_json(const std::vector<WorkerPosition>& positions);
std::optional<std::vector<WorkerPosition>> positions_from_json(const std::string& text);

}  // namespace pstrain

// JSON views of the job records and node views: what the REST API returns (their stored form is
// job_codec.h). Boost.JSON stays inside job_json.cc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "coordinator/store/job_record.h"
#include "coordinator/store/model_catalog.h"

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

// The ids of the unfinished ones of `jobs` whose spec names `dataset` (a dataset in use cannot be deleted).
std::vector<std::string> jobs_using_dataset(const std::vector<JobRecord>& jobs, const std::string& dataset);

}  // namespace pstrain

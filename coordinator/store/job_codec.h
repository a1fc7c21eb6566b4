// The stored form of the job records (JobStore's values in RocksDB): JSON text per record, per
// step and epoch metric, and per async cut's worker positions. Decoders return nullopt for text
// they cannot read (a value damaged or written by a future version), never throw.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/json/fwd.hpp>

#include "coordinator/store/job_record.h"

namespace pstrain {

// Parts of the stored form that the REST views (job_json.cc) show as they are: a checkpoint's
// entry, the warnings, an optional number (null when absent).
boost::json::object checkpoint_object(const CheckpointInfo& c);
boost::json::array warnings_array(const std::vector<JobWarning>& warnings);
// A job's early stopping status (null: its spec has none, or no epoch is recorded yet).
boost::json::value early_stop_value(const std::optional<EarlyStopStatus>& e);
boost::json::value optional_number(const std::optional<double>& v);

// Storage forms (everything but the metric history, which is stored entry by entry).
std::string record_to_json(const JobRecord& job);
std::optional<JobRecord> record_from_json(const std::string& text);
std::string step_to_json(const StepMetric& m);
std::optional<StepMetric> step_from_json(const std::string& text);
std::string epoch_to_json(const EpochMetric& m);
// The task's figures of an epoch into `o` (which holds the common ones): top-5 accuracy and AUC
// when present; for regression MAE, RMSE and R^2 in place of the accuracies. The stored record
// and the "epoch" event (job_events.cc) both use it.
void put_task_metrics(const EpochMetric& m, boost::json::object& o);
std::optional<EpochMetric> epoch_from_json(const std::string& text);
// An async cut's worker positions: [[epoch, step, steps_done], ...] by worker index.
std::string positions_to_json(const std::vector<WorkerPosition>& positions);
std::optional<std::vector<WorkerPosition>> positions_from_json(const std::string& text);

}  // namespace pstrain

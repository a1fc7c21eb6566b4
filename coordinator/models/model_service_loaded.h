// ModelService's decoded model (model_service.h), shared by its .cc files (model_service.cc,
// model_export.cc). Owned by the service's cache; used on the service's thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/data/preprocessing.h"
#include "common/engine/nn/model.h"
#include "coordinator/models/model_service.h"

namespace pstrain {

// A service call's answer that is an error.
inline ModelService::Result failed(ServiceError e) {
  ModelService::Result r;
  r.error = std::move(e);
  return r;
}

struct ModelService::Loaded {
  std::string id;
  JobSpec spec;
  // A table model's fitted preprocessing (the file's metadata "preprocessing"): predictions take
  // records by field name and evaluation the table's stored splits.
  std::shared_ptr<const FittedPreprocessing> preprocessing;
  // The classes' names: a table model's preprocessing's, else its file's class_names (a
  // class-folder dataset's); empty: numbered classes.
  std::vector<std::string> class_names;
  Dtype input_dtype = Dtype::kFloat32;  // how its dataset stores inputs (ModelService::input_dtype_of)
  std::unique_ptr<nn::Model<float>> model;
  std::vector<float> params;
};

}  // namespace pstrain

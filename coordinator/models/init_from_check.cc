#include "coordinator/models/init_from_check.h"

#include <algorithm>
#include <map>

#include "common/engine/model_spec.h"

namespace pstrain {

void check_init_from(const JobSpec& spec, const JobStore& store) {
  const InitFromSpec& from = spec.init_from;
  if (from.source == InitFromSpec::Source::kNone) return;
  const bool job_source = from.source == InitFromSpec::Source::kJob;
  const std::string field = job_source ? "/init_from/job" : "/init_from/model";
  if (!job_source) {
    if (const std::optional<UploadedModel> upload = store.uploads().get(from.id)) {
      if (from.optimizer_state) {
        throw SpecError("/init_from/optimizer_state",
                        "an uploaded model holds parameters only; fine-tune from it (\"optimizer_state\": false)");
      }
      // Its tensors, by name and shape (an optimizer's slots in the file are not read).
      const ParamLayout ours = make_param_layout(spec.model);
      std::map<std::string, Shape> theirs;
      for (const SafetensorsTensor& t : upload->tensors) {
        if (!t.name.starts_with("optimizer.")) theirs[t.name] = t.shape;
      }
      for (const ParamInfo& p : ours.params()) {
        const auto it = theirs.find(p.name);
        if (it == theirs.end()) {
          throw SpecError("/init_from", "tensor '" + p.name + "' of this model is not in uploaded model '" + from.id + "'");
        }
        if (it->second != p.shape) {
          throw SpecError("/init_from", "tensor '" + p.name + "' has shape " + shape_string(it->second) +
                                            " in uploaded model '" + from.id + "' and " + shape_string(p.shape) +
                                            " in this model");
        }
      }
      for (const auto& [name, shape] : theirs) {
        if (ours.find(name) == nullptr) {
          throw SpecError("/init_from", "tensor '" + name + "' of uploaded model '" + from.id + "' is not in this model");
        }
      }
      return;
    }
  }
  const std::optional<JobRecord> source = store.get(from.id);
  if (!source) {
    throw SpecError(field, job_source ? "there is no job '" + from.id + "'"
                                      : "there is no model '" + from.id +
                                            "' (a model is an uploaded one, model-N, or a job that SUCCEEDED)");
  }
  if (job_source) {
    if (from.checkpoint) {
      const bool known = std::any_of(source->checkpoints.begin(), source->checkpoints.end(),
                                     [&](const CheckpointInfo& c) { return c.step == *from.checkpoint; });
      if (!known) {
        std::string steps;
        for (const CheckpointInfo& c : source->checkpoints) steps += (steps.empty() ? "" : ", ") + std::to_string(c.step);
        throw SpecError("/init_from/checkpoint", "job '" + from.id + "' has no checkpoint at step " +
                                                     std::to_string(*from.checkpoint) + " (it has: " +
                                                     (steps.empty() ? "none" : steps) + ")");
      }
    } else if (source->checkpoints.empty() && !source->has_model) {
      throw SpecError("/init_from/job", "job '" + from.id + "' has no checkpoint yet (it is " +
                                            job_state_name(source->state) + ")");
    }
  } else if (!source->has_model) {
    throw SpecError("/init_from/model", "job '" + from.id + "' is " + job_state_name(source->state) +
                                            "; its model is available once it has SUCCEEDED");
  }
  JobSpec source_spec;
  try {
    source_spec = parse_accepted_job_spec(source->spec_json);
  } catch (const Error& e) {
    throw SpecError(field, "the spec of '" + from.id + "' cannot be read: " + e.what());
  }
  // The tensors, by name and shape.
  const ParamLayout ours = make_param_layout(spec.model), theirs = make_param_layout(source_spec.model);
  for (const ParamInfo& p : ours.params()) {
    const ParamInfo* q = theirs.find(p.name);
    if (q == nullptr) {
      throw SpecError("/init_from", "tensor '" + p.name + "' of this model is not in the model of '" + from.id + "'");
    }
    if (q->shape != p.shape) {
      throw SpecError("/init_from", "tensor '" + p.name + "' has shape " + shape_string(q->shape) + " in '" + from.id +
                                        "' and " + shape_string(p.shape) + " in this model");
    }
  }
  for (const ParamInfo& q : theirs.params()) {
    if (ours.find(q.name) == nullptr) {
      throw SpecError("/init_from", "tensor '" + q.name + "' of the model of '" + from.id + "' is not in this model");
    }
  }
  if (from.optimizer_state) {
    if (!job_source) {
      throw SpecError("/init_from/optimizer_state",
                      "a model holds parameters only; resume from a job's checkpoint ({\"job\": ID}), or fine-tune "
                      "(\"optimizer_state\": false)");
    }
    if (source_spec.optimizer.type != spec.optimizer.type) {
      throw SpecError("/init_from/optimizer_state", std::string("job '") + from.id + "' was trained with " +
                                                        optimizer_type_name(source_spec.optimizer.type) +
                                                        "; resuming its optimizer state needs the same optimizer, not " +
                                                        optimizer_type_name(spec.optimizer.type));
    }
    if (from.checkpoint || !source->checkpoints.empty()) return;
    throw SpecError("/init_from/optimizer_state", "job '" + from.id +
                                                      "' has no checkpoint with optimizer state; fine-tune from its model "
                                                      "(\"optimizer_state\": false)");
  }
}

}  // namespace pstrain

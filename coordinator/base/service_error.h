// What went wrong in one of the coordinator's services (the dataset catalog, the model service),
// in the terms the REST layer answers with: an HTTP status, a problem type and a detail, and what
// it names. The services know nothing of HTTP beyond this; rest_api.cc turns it into problem+json.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace pstrain {

struct ServiceError {
  unsigned status = 422;  // 400, 404, 409, 413, 415, 422, 500
  std::string type;       // problem type suffix: "dataset-ragged-row", "model-not-found", ...
  std::string detail;
  std::string field;      // the query parameter, JSON pointer or header at fault, if any
  uint64_t line = 0;      // a CSV defect's line (0: none)
  std::string column;     // a CSV defect's column ("": none)
};

inline ServiceError service_error(unsigned status, std::string type, std::string detail, std::string field = "") {
  ServiceError e;
  e.status = status;
  e.type = std::move(type);
  e.detail = std::move(detail);
  e.field = std::move(field);
  return e;
}

}  // namespace pstrain

// `pstrain predict ID FILE [--scaled]`: a model's predictions for the examples in FILE, over the
// REST API (POST /v1/models/{id}:predict, 1,024 instances per request), under the service's one
// input convention (docs/REST.md): examples as their dataset stores them.
//   FILE  .npy of shape (n, ...): uint8 goes as raw bytes ({"b64"}), float32/float64/int32/int64
//         as numbers (raw pixel values 0-255 for an image model); or .json: an array of instances
//         (or {"instances": [...]}) sent as they are; '-' reads that JSON from standard input.
//   --scaled  values already scaled as the model sees them (pixel / 255): "input_form": "scaled".
// Prints a table (instance, class, probability; or the values of a regression model), or with
// --json {"predictions": [...]} as the API answers it, every batch's in order.
// Blocking; one thread.
#pragma once

#include <ostream>
#include <string>

#include "cli/http_client.h"

namespace pstrain::cli {

struct PredictInvocation {
  std::string model, file;
  bool json = false, scaled = false;
};

// Returns the exit code (kExitOk, or kExitFailed with the API's detail: a refused instance names
// its index in the whole file). Throws UsageError for an unreadable or malformed FILE.
int run_predict(const PredictInvocation& inv, HttpClient& client, std::ostream& out, std::ostream& err);

}  // namespace pstrain::cli

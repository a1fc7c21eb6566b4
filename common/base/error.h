// Error types of the engine layer (common/).
//
// The engine reports bad input with exceptions carrying a precise message; the edges translate
// them: the trainer's main prints them, the REST layer maps SpecError to 400/422 problem+json,
// RPC code turns them into KJ exceptions for the caller.
#pragma once

#include <stdexcept>
#include <string>

namespace pstrain {

// Base of every error the project throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file or dataset is missing, unreadable or malformed. The message names the file.
class DataError : public Error {
 public:
  using Error::Error;
};

// Training diverged: the loss became NaN or infinite. The message has the figures (the loss, the
// epoch and step). A worker reports it as its job's failure, marked as a divergence (the
// coordinator's divergence guard counts it).
class LossNotFinite : public Error {
 public:
  using Error::Error;
};

// A job or model spec is invalid. `path` is a JSON pointer to the offending field
// ("/model/layers/2/units"); `detail` says what is wrong with it. what() is "path detail".
class SpecError : public Error {
 public:
  enum class Kind {
    kMalformed,  // not JSON at all (HTTP 400)
    kInvalid,    // JSON, but not a valid spec (HTTP 422)
  };
  SpecError(std::string path, std::string detail, Kind kind = Kind::kInvalid)
      : Error(path.empty() ? detail : path + " " + detail),
        path_(std::move(path)),
        detail_(std::move(detail)),
        kind_(kind) {}
  const std::string& path() const { return path_; }
  const std::string& detail() const { return detail_; }
  Kind kind() const { return kind_; }

 private:
  std::string path_;
  std::string detail_;
  Kind kind_;
};

}  // namespace pstrain

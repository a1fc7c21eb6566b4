// Fuzz target: the job-spec parser (common/data/job_spec_json.cc). Any bytes are given to
// parse_job_spec; a SpecError is the expected answer to most. A spec that parses must survive
// the trip every accepted spec makes (coordinator → canonical JSON → server or worker): its
// canonical text parses again with parse_accepted_job_spec, to the same canonical text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/base/error.h"
#include "common/data/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  pstrain::JobSpec spec;
  try {
    spec = pstrain::parse_job_spec(text);
  } catch (const pstrain::SpecError&) {
    return 0;
  }
  const std::string canonical = pstrain::job_spec_to_json(spec);
  std::string again;
  try {
    again = pstrain::job_spec_to_json(pstrain::parse_accepted_job_spec(canonical));
  } catch (const pstrain::SpecError& e) {
    std::fprintf(stderr, "canonical text of an accepted spec does not parse: %s\n%s\n", e.what(), canonical.c_str());
    std::abort();
  }
  if (again != canonical) {
    std::fprintf(stderr, "canonical text is not stable:\n%s\n%s\n", canonical.c_str(), again.c_str());
    std::abort();
  }
  return 0;
}

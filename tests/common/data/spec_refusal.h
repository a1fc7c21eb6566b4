// A job spec that parse_job_spec must refuse: the SpecError names `field` and says `what`.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "common/base/error.h"
#include "common/data/job_spec.h"

namespace pstrain::testing {

inline void refused(const std::string& text, const std::string& field, const std::string& what) {
  try {
    parse_job_spec(text);
    FAIL("accepted: " << text);
  } catch (const SpecError& e) {
    CHECK(e.path() == field);
    CHECK_MESSAGE(std::string(e.what()).find(what) != std::string::npos, e.what());
  }
}

}  // namespace pstrain::testing

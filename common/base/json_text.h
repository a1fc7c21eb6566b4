// JSON text for humans and machines alike: like boost::json::serialize, but numbers in their
// shortest round-trip decimal form (0.935, 58.3, 0) instead of Boost 1.81's exponent form
// (9.35E-1, 5.83E1, 0E0), which is valid JSON but hard to read in curl output.
#pragma once

#include <boost/json/value.hpp>

#include <string>

namespace pstrain {

std::string to_json_text(const boost::json::value& value);

// Rounds to `digits` decimals (for derived figures such as percentages and rates).
double round_to(double value, int digits);

}  // namespace pstrain

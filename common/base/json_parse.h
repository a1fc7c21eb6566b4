// JSON text read back to the same bits: boost::json::parse, except that every number with a
// fraction or an exponent is read to the nearest double (std::from_chars, correctly rounded).
//
// Why: Boost 1.81's parser rounds some decimal numbers to a neighbour of the nearest double (its
// exact mode came in 1.83), so a figure written in its shortest round-trip form (to_json_text,
// boost::json::serialize) could come back one ulp off: a job's test accuracy read
// 0.9017607042817127 before a coordinator restart and 0.9017607042817128 after (issue 48). Every
// JSON document the project reads goes through here; tests/common/base/json_parse_test.cc checks
// random doubles (subnormals, 17 digits, large exponents) for identical bits.
//
// Thread rules: pure functions.
#pragma once

#include <boost/json/parse_options.hpp>
#include <boost/json/value.hpp>
#include <boost/system/error_code.hpp>

#include <string_view>

namespace pstrain {

// Parses one JSON document (RFC 8259; whitespace around it, nothing else). Throws
// boost::system::system_error on bad input, as boost::json::parse does.
boost::json::value parse_json(std::string_view text);
// The same, reporting bad input in `ec` (the result is then null).
boost::json::value parse_json(std::string_view text, boost::system::error_code& ec);
// The same with Boost's parse options (comments, trailing commas, a depth limit, ...).
boost::json::value parse_json(std::string_view text, boost::system::error_code& ec,
                              const boost::json::parse_options& options);

}  // namespace pstrain

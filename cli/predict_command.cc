#include "cli/predict_command.h"

#include <boost/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli_support.h"
#include "cli/follow.h"

namespace pstrain::cli {
namespace {

constexpr size_t kBatch = 1024;  // instances per request (the service takes up to 4,096)

std::string read_all(const std::string& path) {
  std::ostringstream s;
  if (path == "-") {
    s << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError("cannot read '" + path + "'");
    s << in.rdbuf();
  }
  return s.str();
}

std::string base64(const uint8_t* data, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{data[i]} << 16) | (i + 1 < n ? uint32_t{data[i + 1]} << 8 : 0) | (i + 2 < n ? data[i + 2] : 0);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < n ? k[(v >> 6) & 63] : '=';
    out += i + 2 < n ? k[v & 63] : '=';
  }
  return out;
}

// The text of `key`'s value in an .npy header's dict, between the first `open` after the key and
// the next `close` (exclusive).
std::string header_field(const std::string& header, const std::string& key, char open, char close, const std::string& path) {
  const size_t at = header.find("'" + key + "'");
  const size_t colon = at == std::string::npos ? at : header.find(':', at);
  const size_t from = colon == std::string::npos ? colon : header.find(open, colon + 1);
  const size_t to = from == std::string::npos ? from : header.find(close, from + 1);
  if (to == std::string::npos) throw UsageError(path + ": its .npy header has no readable '" + key + "'");
  return header.substr(from + 1, to - from - 1);
}

// One little-endian value of an .npy's numeric dtype (`descr`: <f4, <f8, <i4 or <i8).
json::value npy_number(const char* v, const std::string& descr) {
  if (descr == "<f4") {
    float x;
    std::memcpy(&x, v, sizeof x);
    return static_cast<double>(x);
  }
  if (descr == "<f8") {
    double x;
    std::memcpy(&x, v, sizeof x);
    return x;
  }
  if (descr == "<i4") {
    int32_t x;
    std::memcpy(&x, v, sizeof x);
    return static_cast<int64_t>(x);
  }
  int64_t x;
  std::memcpy(&x, v, sizeof x);
  return x;
}

// The instances of an .npy file: one per row of its first axis, flat.
json::array npy_instances(const std::string& bytes, const std::string& path) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) throw UsageError(path + ": not an .npy file");
  const auto major = static_cast<uint8_t>(bytes[6]);
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) throw UsageError(path + ": a truncated .npy header");
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_len |= size_t{static_cast<uint8_t>(bytes[8 + i])} << (8 * i);
  const size_t data_at = 8 + length_bytes + header_len;
  if (data_at > bytes.size()) throw UsageError(path + ": a truncated .npy header");
  const std::string header = bytes.substr(8 + length_bytes, header_len);
  const std::string descr = header_field(header, "descr", '\'', '\'', path);
  if (header_field(header, "fortran_order", ' ', ',', path).find("True") != std::string::npos) {
    throw UsageError(path + ": Fortran order is not read; save it with numpy.ascontiguousarray");
  }
  const std::string shape_text = header_field(header, "shape", '(', ')', path) + ",";
  std::vector<uint64_t> shape;
  for (size_t i = 0, end; (end = shape_text.find(',', i)) != std::string::npos; i = end + 1) {
    const std::string part = shape_text.substr(i, end - i);
    if (part.find_first_not_of(' ') == std::string::npos) continue;
    try {
      shape.push_back(std::stoull(part));
    } catch (const std::exception&) {
      throw UsageError(path + ": its .npy shape (" + shape_text + ") is not a list of sizes");
    }
  }
  if (shape.size() < 2) throw UsageError(path + ": an .npy of examples has shape (n, ...), not rank " + std::to_string(shape.size()));
  uint64_t per = 1;
  for (size_t i = 1; i < shape.size(); ++i) per *= shape[i];
  const size_t width = descr == "|u1" ? 1 : descr == "<f4" || descr == "<i4" ? 4 : descr == "<f8" || descr == "<i8" ? 8 : 0;
  if (width == 0) throw UsageError(path + ": dtype '" + descr + "' is not read (uint8, float32, float64, int32 or int64)");
  if (bytes.size() - data_at != shape[0] * per * width) throw UsageError(path + ": its data does not fit its shape");
  const char* data = bytes.data() + data_at;
  json::array instances;
  for (uint64_t n = 0; n < shape[0]; ++n) {
    const char* row = data + n * per * width;
    if (descr == "|u1") {
      instances.push_back(json::object{{"b64", base64(reinterpret_cast<const uint8_t*>(row), per)}});
      continue;
    }
    json::array values;
    values.reserve(per);
    for (uint64_t i = 0; i < per; ++i) values.push_back(npy_number(row + i * width, descr));
    instances.push_back(std::move(values));
  }
  return instances;
}

json::array json_instances(const std::string& text, const std::string& path) {
  const auto v = parse_json(text);
  if (v && v->is_array()) return v->as_array();
  if (v && v->is_object() && v->as_object().contains("instances") && v->as_object().at("instances").is_array()) {
    return v->as_object().at("instances").as_array();
  }
  throw UsageError(path + ": a JSON file of instances is an array, or an object {\"instances\": [...]}");
}

// "/instances/7" in a batch starting at `first`: the same index in the whole file.
std::string whole_file_detail(std::string detail, size_t first) {
  const std::string prefix = "/instances/";
  const size_t at = detail.find(prefix);
  if (at == std::string::npos) return detail;
  const size_t from = at + prefix.size();
  size_t to = from;
  while (to < detail.size() && detail[to] >= '0' && detail[to] <= '9') ++to;
  if (to == from) return detail;
  return detail.replace(from, to - from, std::to_string(std::stoull(detail.substr(from, to - from)) + first));
}

}  // namespace

int run_predict(const PredictInvocation& inv, HttpClient& client, std::ostream& out, std::ostream& err) {
  const std::string bytes = read_all(inv.file);
  const json::array instances = inv.file.ends_with(".npy") ? npy_instances(bytes, inv.file) : json_instances(bytes, inv.file);
  if (instances.empty()) throw UsageError(inv.file + ": no instances");
  json::array predictions;
  for (size_t first = 0; first < instances.size(); first += kBatch) {
    json::object body;
    body["instances"] = json::array(instances.begin() + static_cast<ptrdiff_t>(first),
                                    instances.begin() + static_cast<ptrdiff_t>(std::min(instances.size(), first + kBatch)));
    if (inv.scaled) body["input_form"] = "scaled";
    const Response r = client.request("POST", "/v1/models/" + inv.model + ":predict", json::serialize(body), "application/json");
    const auto v = r.status == 200 ? parse_json(r.body) : std::nullopt;
    if (!v || !v->is_object() || !v->as_object().contains("predictions")) {
      if (inv.json && !r.body.empty()) out << r.body << "\n";
      const std::string detail = whole_file_detail(problem_message(r), first);
      err << "pstrain: " << detail << (detail.find("input_form") != std::string::npos ? " (pstrain predict --scaled)" : "")
          << "\n";
      return kExitFailed;
    }
    for (const auto& p : v->as_object().at("predictions").as_array()) predictions.push_back(p);
  }
  if (inv.json) {
    out << json::serialize(json::object{{"predictions", predictions}}) << "\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"INSTANCE", "CLASS", "PROBABILITY"}};
  for (size_t i = 0; i < predictions.size(); ++i) {
    const json::object& p = as_object(predictions[i]);
    if (!p.contains("class")) {  // a regression model: its value(s)
      if (rows.front()[1] == "CLASS") rows.front() = {"INSTANCE", "VALUE"};
      rows.push_back({std::to_string(i), json::serialize(p.contains("value") ? p.at("value") : p.at("values"))});
      continue;
    }
    const json::value& probs = p.at("probabilities");
    double best = 0;
    if (probs.is_array()) {
      for (const auto& x : probs.as_array()) best = std::max(best, x.to_number<double>());
    } else if (probs.is_object()) {
      for (const auto& [name, x] : probs.as_object()) best = std::max(best, x.to_number<double>());
    }
    const json::value& c = p.at("class");
    rows.push_back({std::to_string(i), c.is_string() ? std::string(c.as_string()) : json::serialize(c), fixed(best, 4)});
  }
  out << table(rows);
  return kExitOk;
}

}  // namespace pstrain::cli

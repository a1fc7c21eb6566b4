#include "common/data/table_schema.h"

#include <boost/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "common/data/id_hash.h"

namespace pstrain {
namespace json = boost::json;

const char* column_type_name(ColumnType type) {
  switch (type) {
    case ColumnType::kNumeric: return "numeric";
    case ColumnType::kCategorical: return "categorical";
    case ColumnType::kBoolean: return "boolean";
    case ColumnType::kIgnored: return "ignore";
    case ColumnType::kText: return "text";
    case ColumnType::kId: return "id";
  }
  return "numeric";
}

std::optional<ColumnType> column_type_from_name(const std::string& name) {
  for (ColumnType t : {ColumnType::kNumeric, ColumnType::kCategorical, ColumnType::kBoolean, ColumnType::kIgnored, ColumnType::kText,
                       ColumnType::kId}) {
    if (name == column_type_name(t)) return t;
  }
  return std::nullopt;
}

std::vector<const TableColumn*> TableSchema::stored_columns() const {
  std::vector<const TableColumn*> out;
  for (const TableColumn& c : columns) {
    if (c.type != ColumnType::kIgnored && c.type != ColumnType::kText) out.push_back(&c);
  }
  return out;
}

uint32_t stored_values(ColumnType type) {
  return type == ColumnType::kId ? 2 : type == ColumnType::kIgnored || type == ColumnType::kText ? 0 : 1;
}

uint32_t TableSchema::row_width() const {
  uint32_t n = 0;
  for (const TableColumn& c : columns) n += stored_values(c.type);
  return n;
}

std::vector<const TableColumn*> TableSchema::text_columns() const {
  std::vector<const TableColumn*> out;
  for (const TableColumn& c : columns) {
    if (c.type == ColumnType::kText) out.push_back(&c);
  }
  return out;
}

bool TableSchema::needs_preprocessing() const {
  for (const TableColumn* c : stored_columns()) {
    if (c->type == ColumnType::kCategorical || c->type == ColumnType::kId || c->profile.missing > 0) return true;
  }
  return false;
}

namespace {

// HyperLogLog (Flajolet et al., 2007) over 48-bit fingerprints, rehashed to 64 bits: the top
// kHllBits pick a register, which keeps the longest run of leading zeros (+1) of the rest.
constexpr int kHllBits = 14;
constexpr size_t kHllRegisters = size_t{1} << kHllBits;

void hll_add(std::vector<uint8_t>& registers, uint64_t fingerprint) {
  const uint64_t h = splitmix64_finalize(fingerprint);
  const uint64_t rest = h << kHllBits;
  const auto rank = static_cast<uint8_t>(rest == 0 ? 64 - kHllBits + 1 : std::countl_zero(rest) + 1);
  uint8_t& r = registers[h >> (64 - kHllBits)];
  r = std::max(r, rank);
}

// The raw estimate, with linear counting where it is small (the registers still have zeros).
uint64_t hll_estimate(const std::vector<uint8_t>& registers) {
  const auto m = static_cast<double>(kHllRegisters);
  double sum = 0;
  size_t zeros = 0;
  for (const uint8_t r : registers) {
    sum += std::ldexp(1.0, -r);
    zeros += r == 0;
  }
  double e = 0.7213 / (1 + 1.079 / m) * m * m / sum;
  if (e <= 2.5 * m && zeros > 0) e = m * std::log(m / static_cast<double>(zeros));
  return static_cast<uint64_t>(std::llround(e));
}

}  // namespace

TableProfiler::TableProfiler(const TableSchema& schema) : schema_(schema) {
  size_t offset = 0;
  for (size_t i = 0; i < schema_.columns.size(); ++i) {
    const uint32_t values = stored_values(schema_.columns[i].type);
    if (values == 0) continue;
    stored_.push_back(i);
    offset_.push_back(offset);
    offset += values;
  }
  missing_.assign(stored_.size(), 0);
  moments_.resize(stored_.size());
  counts_.resize(stored_.size());
  registers_.resize(stored_.size());
  for (size_t k = 0; k < stored_.size(); ++k) {
    const TableColumn& c = schema_.columns[stored_[k]];
    if (c.type == ColumnType::kCategorical) counts_[k].assign(c.categories.size(), 0);
    if (c.type == ColumnType::kBoolean) counts_[k].assign(2, 0);
    if (c.type == ColumnType::kId) registers_[k].assign(kHllRegisters, 0);
  }
}

void TableProfiler::add(const float* row) {
  ++rows_;
  for (size_t k = 0; k < stored_.size(); ++k) {
    const float v = row[offset_[k]];
    if (std::isnan(v)) {
      ++missing_[k];
      continue;
    }
    if (!registers_[k].empty()) {
      uint64_t fingerprint = 0;
      if (fingerprint_from_values(v, row[offset_[k] + 1], &fingerprint)) hll_add(registers_[k], fingerprint);
      continue;
    }
    if (!counts_[k].empty() || schema_.columns[stored_[k]].type != ColumnType::kNumeric) {
      const auto code = static_cast<size_t>(v);
      if (code < counts_[k].size()) ++counts_[k][code];
      continue;
    }
    Moments& m = moments_[k];
    const double d = v;
    if (m.n == 0) m.min = m.max = d;
    m.min = std::min(m.min, d);
    m.max = std::max(m.max, d);
    ++m.n;
    const double delta = d - m.mean;
    m.mean += delta / static_cast<double>(m.n);
    m.m2 += delta * (d - m.mean);
  }
}

TableSchema TableProfiler::finish() const {
  TableSchema t = schema_;
  t.rows = rows_;
  const double nan = std::nan("");
  for (size_t k = 0; k < stored_.size(); ++k) {
    TableColumn& c = t.columns[stored_[k]];
    ColumnProfile& p = c.profile;
    p = ColumnProfile{};
    p.missing = missing_[k];
    if (c.type == ColumnType::kNumeric) {
      const Moments& m = moments_[k];
      p.min = m.n ? m.min : nan;
      p.max = m.n ? m.max : nan;
      p.mean = m.n ? m.mean : nan;
      p.std = m.n > 1 ? std::sqrt(m.m2 / static_cast<double>(m.n - 1)) : nan;
      continue;
    }
    if (c.type == ColumnType::kId) {
      p.distinct_estimate = rows_ > missing_[k] ? hll_estimate(registers_[k]) : 0;
      continue;
    }
    for (size_t code = 0; code < counts_[k].size(); ++code) {
      if (counts_[k][code] == 0) continue;
      const std::string name = c.type == ColumnType::kBoolean ? (code == 1 ? "true" : "false") : c.categories[code];
      p.top.emplace_back(name, counts_[k][code]);
    }
    std::sort(p.top.begin(), p.top.end(),
              [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
    if (p.top.size() > kProfileTopCategories) p.top.resize(kProfileTopCategories);
  }
  return t;
}

namespace {

json::value number_or_null(double v) { return std::isfinite(v) ? json::value(v) : json::value(nullptr); }

double number_of(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::nan("");
  return v->to_number<double>();
}

}  // namespace

std::string table_to_json(const TableSchema& table) {
  json::array columns;
  for (const TableColumn& c : table.columns) {
    json::object o;
    o["name"] = c.name;
    o["type"] = column_type_name(c.type);
    o["missing"] = c.profile.missing;
    if (c.type == ColumnType::kNumeric) {
      o["min"] = number_or_null(c.profile.min);
      o["max"] = number_or_null(c.profile.max);
      o["mean"] = number_or_null(c.profile.mean);
      o["std"] = number_or_null(c.profile.std);
    }
    if (c.type == ColumnType::kCategorical || c.type == ColumnType::kBoolean) {
      json::array top;
      for (const auto& [value, count] : c.profile.top) top.push_back(json::object{{"value", value}, {"count", count}});
      o["top"] = std::move(top);
    }
    if (c.type == ColumnType::kId) o["distinct_estimate"] = c.profile.distinct_estimate;
    if (c.type == ColumnType::kText && c.profile.text) o["text"] = parse_json(text_profile_to_json(*c.profile.text));
    if (c.type == ColumnType::kCategorical) {
      o["distinct"] = c.categories.size();
      json::array cats;
      for (const std::string& s : c.categories) cats.push_back(json::string(s));
      o["categories"] = std::move(cats);
    }
    columns.push_back(std::move(o));
  }
  json::object out;
  out["separator"] = std::string(1, table.separator);
  out["rows"] = table.rows;
  out["label"] = table.label;
  json::array names;
  for (const std::string& n : table.class_names) names.push_back(json::string(n));
  out["class_names"] = std::move(names);
  out["columns"] = std::move(columns);
  return to_json_text(out);
}

TableSchema table_from_json(const std::string& text, const std::string& source) {
  TableSchema t;
  std::string field = "";
  try {
    const json::object root = parse_json(text).as_object();
    field = "separator";
    const std::string sep(root.at("separator").as_string());
    if (sep.size() != 1) throw DataError(source + ": separator must be one character");
    t.separator = sep[0];
    field = "rows";
    t.rows = root.at("rows").to_number<uint64_t>();
    field = "label";
    t.label = std::string(root.at("label").as_string());
    field = "class_names";
    for (const json::value& n : root.at("class_names").as_array()) t.class_names.emplace_back(n.as_string());
    field = "columns";
    for (const json::value& cv : root.at("columns").as_array()) {
      const json::object& o = cv.as_object();
      TableColumn c;
      c.name = std::string(o.at("name").as_string());
      const auto type = column_type_from_name(std::string(o.at("type").as_string()));
      if (!type) throw DataError(source + ": column '" + c.name + "' has an unknown type");
      c.type = *type;
      c.profile.missing = o.at("missing").to_number<uint64_t>();
      c.profile.min = number_of(o, "min");
      c.profile.max = number_of(o, "max");
      c.profile.mean = number_of(o, "mean");
      c.profile.std = number_of(o, "std");
      if (const json::value* d = o.if_contains("distinct_estimate")) c.profile.distinct_estimate = d->to_number<uint64_t>();
      if (const json::value* top = o.if_contains("top")) {
        for (const json::value& e : top->as_array()) {
          c.profile.top.emplace_back(std::string(e.at("value").as_string()), e.at("count").to_number<uint64_t>());
        }
      }
      if (const json::value* text = o.if_contains("text")) {
        c.profile.text = text_profile_from_json(json::serialize(*text), source + " (column '" + c.name + "')");
      }
      if (const json::value* cats = o.if_contains("categories")) {
        for (const json::value& s : cats->as_array()) c.categories.emplace_back(s.as_string());
      }
      t.columns.push_back(std::move(c));
    }
  } catch (const DataError&) {
    throw;
  } catch (const std::exception& e) {
    throw DataError(source + ": not a table description (field '" + field + "'): " + e.what());
  }
  return t;
}

}  // namespace pstrain

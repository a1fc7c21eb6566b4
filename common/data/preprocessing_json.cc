// The job spec's `preprocessing` section and the fitted form's JSON (preprocessing.h):
//   {"numeric": {<steps>}, "boolean": {<steps>}, "categorical": {<steps>},
//    "columns": {"<name>": {<steps>} | "drop", ...},
//    "crosses": [{"columns": ["<name>", "<name>", ...], "num_bins": <int>, "name": "<name>"}, ...]}
// with <steps> = {"scale": "standardize" | "minmax" | "none", "impute": "mean" | "median" |
// "most_frequent" | "constant", "fill_value": <number>, "indicator": <bool>,
// "max_categories": <int >= 1>, "encode": "one_hot" | "ids" | "hash", "num_bins": <int>,
// "drop": <bool>}.
#include <algorithm>
#include <cmath>
#include <functional>

#include "common/base/json_parse.h"
#include "common/data/id_hash.h"
#include "common/data/preprocessing.h"
#include "common/data/spec_reader.h"

namespace pstrain {
using namespace spec_json;

namespace {

constexpr std::pair<const char*, Scaling> kScalings[] = {
    {"standardize", Scaling::kStandardize}, {"minmax", Scaling::kMinMax}, {"none", Scaling::kNone}};
constexpr std::pair<const char*, Imputation> kImputations[] = {{"mean", Imputation::kMean},
                                                               {"median", Imputation::kMedian},
                                                               {"most_frequent", Imputation::kMostFrequent},
                                                               {"constant", Imputation::kConstant}};

template <typename Enum, size_t N>
const char* name_of(const std::pair<const char*, Enum> (&table)[N], Enum e) {
  for (const auto& [name, value] : table) {
    if (value == e) return name;
  }
  return "";
}

ColumnSteps read_steps(const json::value& v, const std::string& path, bool allow_drop) {
  ColumnSteps s;
  if (allow_drop && v.is_string() && v.as_string() == "drop") {
    s.drop = true;
    return s;
  }
  ObjectReader r(v, path);
  if (const json::value* x = r.optional("scale")) {
    s.scale = read_enum(*x, r.field_path("scale"), {kScalings[0], kScalings[1], kScalings[2]});
  }
  if (const json::value* x = r.optional("impute")) {
    s.impute = read_enum(*x, r.field_path("impute"), {kImputations[0], kImputations[1], kImputations[2], kImputations[3]});
  }
  if (const json::value* x = r.optional("fill_value")) s.fill_value = read_number(*x, r.field_path("fill_value"), -3.4e38, 3.4e38, false);
  if (const json::value* x = r.optional("indicator")) {
    if (!x->is_bool()) throw SpecError(r.field_path("indicator"), "must be true or false, not " + kind_of(*x));
    s.indicator = x->as_bool();
  }
  if (const json::value* x = r.optional("max_categories")) {
    s.max_categories = static_cast<uint32_t>(read_int(*x, r.field_path("max_categories"), 1, kMaxIdVocabulary));
  }
  if (const json::value* x = r.optional("encode")) {
    s.encode = read_enum<Encoding>(*x, r.field_path("encode"),
                                   {{"one_hot", Encoding::kOneHot}, {"ids", Encoding::kIds}, {"hash", Encoding::kHash}});
  }
  if (const json::value* x = r.optional("num_bins")) {
    s.num_bins = static_cast<uint32_t>(read_int(*x, r.field_path("num_bins"), 1, kMaxHashBins));
  }
  if (const json::value* x = r.optional("separator")) {
    if (!allow_drop) throw SpecError(r.field_path("separator"), "a multi-valued column is said under /preprocessing/columns");
    s.separator = read_string(*x, r.field_path("separator"));
    if (s.separator->empty() || s.separator->size() > 16) throw SpecError(r.field_path("separator"), "must be 1 to 16 bytes");
  }
  if (const json::value* x = r.optional("max_values")) {
    if (!allow_drop) throw SpecError(r.field_path("max_values"), "a multi-valued column is said under /preprocessing/columns");
    s.max_values = static_cast<uint32_t>(read_int(*x, r.field_path("max_values"), 1, kMaxValues));
  }
  if (s.encode == Encoding::kHash && !s.num_bins) throw SpecError(r.field_path("num_bins"), "encode \"hash\" needs num_bins (1 to 16777216)");
  if (s.num_bins && s.encode != Encoding::kHash) throw SpecError(r.field_path("num_bins"), "applies to encode \"hash\"");
  if (const json::value* x = r.optional("text")) {
    if (!allow_drop) throw SpecError(r.field_path("text"), "a text column's tokenizer is said under /preprocessing/columns (or as /preprocessing/text)");
    s.text = read_tokenizer_spec(*x, r.field_path("text"));
  }
  if (const json::value* x = r.optional("drop")) {
    if (!x->is_bool()) throw SpecError(r.field_path("drop"), "must be true or false, not " + kind_of(*x));
    if (!allow_drop && x->as_bool()) throw SpecError(r.field_path("drop"), "drops a single column: say it under /preprocessing/columns");
    s.drop = x->as_bool();
  }
  if (s.fill_value && s.impute && *s.impute != Imputation::kConstant) {
    throw SpecError(r.field_path("fill_value"), "applies to impute \"constant\"");
  }
  r.finish();
  return s;
}

json::object steps_to_object(const ColumnSteps& s) {
  json::object o;
  if (s.scale) o["scale"] = name_of(kScalings, *s.scale);
  if (s.impute) o["impute"] = name_of(kImputations, *s.impute);
  if (s.fill_value) o["fill_value"] = *s.fill_value;
  if (s.indicator) o["indicator"] = *s.indicator;
  if (s.max_categories) o["max_categories"] = *s.max_categories;
  if (s.encode) o["encode"] = *s.encode == Encoding::kIds ? "ids" : *s.encode == Encoding::kHash ? "hash" : "one_hot";
  if (s.num_bins) o["num_bins"] = *s.num_bins;
  if (s.separator) o["separator"] = *s.separator;
  if (s.max_values) o["max_values"] = *s.max_values;
  if (s.text) o["text"] = tokenizer_spec_to_object(*s.text);
  if (s.drop) o["drop"] = true;
  return o;
}

std::vector<CrossSpec> read_crosses(const json::value& v, const std::string& path) {
  if (!v.is_array()) throw SpecError(path, "must be a list of crosses, not " + kind_of(v));
  std::vector<CrossSpec> crosses;
  for (size_t i = 0; i < v.as_array().size(); ++i) {
    const std::string at = path + "/" + std::to_string(i);
    ObjectReader r(v.as_array()[i], at);
    CrossSpec x;
    const json::value* columns = r.optional("columns");
    if (columns == nullptr || !columns->is_array() || columns->as_array().size() < 2) {
      throw SpecError(r.field_path("columns"), "must list two columns or more");
    }
    for (size_t j = 0; j < columns->as_array().size(); ++j) {
      x.columns.push_back(read_string(columns->as_array()[j], r.field_path("columns") + "/" + std::to_string(j)));
    }
    const json::value* bins = r.optional("num_bins");
    if (bins == nullptr) throw SpecError(r.field_path("num_bins"), "is required (1 to 16777216)");
    x.num_bins = static_cast<uint32_t>(read_int(*bins, r.field_path("num_bins"), 1, kMaxHashBins));
    if (const json::value* n = r.optional("name")) {
      x.name = read_string(*n, r.field_path("name"));
    } else {
      for (const std::string& c : x.columns) x.name += (x.name.empty() ? "" : "_x_") + c;
    }
    r.finish();
    crosses.push_back(std::move(x));
  }
  return crosses;
}

}  // namespace

PreprocessingSpec read_preprocessing(const json::value& v) {
  PreprocessingSpec spec;
  spec.given = true;
  ObjectReader r(v, "/preprocessing");
  if (const json::value* x = r.optional("numeric")) spec.numeric = read_steps(*x, r.field_path("numeric"), false);
  if (const json::value* x = r.optional("boolean")) spec.boolean = read_steps(*x, r.field_path("boolean"), false);
  if (const json::value* x = r.optional("categorical")) spec.categorical = read_steps(*x, r.field_path("categorical"), false);
  if (spec.numeric.max_categories || spec.boolean.max_categories) {
    throw SpecError(spec.numeric.max_categories ? "/preprocessing/numeric/max_categories" : "/preprocessing/boolean/max_categories",
                    "applies to categorical columns");
  }
  if (spec.categorical.num_bins && spec.categorical.encode != Encoding::kHash) {
    throw SpecError("/preprocessing/categorical/num_bins", "applies to encode \"hash\"");
  }
  if (spec.numeric.encode || spec.boolean.encode) {
    throw SpecError(spec.numeric.encode ? "/preprocessing/numeric/encode" : "/preprocessing/boolean/encode",
                    "applies to categorical columns");
  }
  if (spec.categorical.scale) throw SpecError("/preprocessing/categorical/scale", "categorical columns are one-hot encoded, not scaled");
  if (const json::value* x = r.optional("columns")) {
    ObjectReader columns(*x, "/preprocessing/columns");
    for (const auto& field : x->as_object()) {
      const std::string name(field.key());
      spec.columns[name] = read_steps(*columns.optional(name), columns.field_path(name), true);
    }
    columns.finish();
  }
  if (const json::value* x = r.optional("crosses")) spec.crosses = read_crosses(*x, r.field_path("crosses"));
  if (const json::value* x = r.optional("text")) spec.text = read_tokenizer_spec(*x, r.field_path("text"));
  r.finish();
  return spec;
}

json::object preprocessing_to_object(const PreprocessingSpec& spec) {
  json::object o;
  if (spec.numeric.scale || spec.numeric.impute || spec.numeric.fill_value || spec.numeric.indicator) o["numeric"] = steps_to_object(spec.numeric);
  if (spec.boolean.scale || spec.boolean.impute || spec.boolean.fill_value || spec.boolean.indicator) o["boolean"] = steps_to_object(spec.boolean);
  const ColumnSteps& c = spec.categorical;
  if (c.impute || c.fill_value || c.indicator || c.max_categories || c.encode || c.num_bins) o["categorical"] = steps_to_object(c);
  if (!spec.columns.empty()) {
    json::object columns;
    for (const auto& [name, steps] : spec.columns) columns[name] = steps_to_object(steps);
    o["columns"] = std::move(columns);
  }
  if (!spec.crosses.empty()) {
    json::array crosses;
    for (const CrossSpec& x : spec.crosses) {
      json::array columns;
      for (const std::string& c : x.columns) columns.push_back(json::string(c));
      crosses.push_back(json::object{{"columns", std::move(columns)}, {"num_bins", x.num_bins}, {"name", x.name}});
    }
    o["crosses"] = std::move(crosses);
  }
  if (spec.text) o["text"] = tokenizer_spec_to_object(*spec.text);
  return o;
}

std::string fitted_to_json(const FittedPreprocessing& fitted) {
  json::array columns;
  for (const FittedColumn& c : fitted.columns) {
    json::object o{{"name", c.name}, {"type", column_type_name(c.type)}};
    if (c.dropped) {
      o["dropped"] = true;
    } else if (c.bins > 0) {
      o["bins"] = c.bins;
      if (c.values > 0) {
        o["separator"] = c.separator;
        o["values"] = c.values;
      }
    } else if (c.type == ColumnType::kId) {
      json::array vocabulary;
      for (const uint64_t fingerprint : c.vocabulary) vocabulary.push_back(fingerprint);
      o["encode"] = "ids";
      o["vocabulary"] = std::move(vocabulary);
    } else if (c.type == ColumnType::kCategorical) {
      json::array cats;
      for (const std::string& k : c.categories) cats.push_back(json::string(k));
      o["categories"] = std::move(cats);
      o["fill_category"] = c.fill_category;
      if (c.ids) o["encode"] = "ids";
    } else {
      // float32 constants: their double value prints exactly enough to read back the same float.
      o["fill"] = static_cast<double>(c.fill);
      o["offset"] = static_cast<double>(c.offset);
      o["scale"] = static_cast<double>(c.scale);
    }
    o["indicator"] = c.indicator;
    columns.push_back(std::move(o));
  }
  json::array names;
  for (const std::string& n : fitted.class_names) names.push_back(json::string(n));
  json::object out{{"label", fitted.label}, {"class_names", std::move(names)}, {"columns", std::move(columns)}};
  if (fitted.text) out["text"] = parse_json(fitted_tokenizer_to_json(*fitted.text));
  if (!fitted.crosses.empty()) {
    json::array crosses;
    for (const FittedCross& x : fitted.crosses) {
      json::array columns;
      for (const uint32_t k : x.columns) columns.push_back(json::string(fitted.columns.at(k).name));
      crosses.push_back(json::object{{"name", x.name}, {"columns", std::move(columns)}, {"bins", x.bins}});
    }
    out["crosses"] = std::move(crosses);
  }
  if (!fitted.text_columns.empty()) {
    json::array texts;
    for (const FittedTextColumn& t : fitted.text_columns) {
      texts.push_back(json::object{{"name", t.name}, {"tokenizer", parse_json(fitted_tokenizer_to_json(*t.tokenizer))}});
    }
    out["text_columns"] = std::move(texts);
  }
  if (!fitted.other_columns.empty()) {
    json::array others;
    for (const std::string& n : fitted.other_columns) others.push_back(json::string(n));
    out["other_columns"] = std::move(others);
  }
  return json::serialize(out);
}

FittedPreprocessing fitted_from_json(const std::string& text) {
  FittedPreprocessing f;
  std::string field = "(the text)";
  try {
    const json::object root = parse_json(text).as_object();
    field = "label";
    f.label = std::string(root.at("label").as_string());
    field = "class_names";
    for (const json::value& n : root.at("class_names").as_array()) f.class_names.emplace_back(n.as_string());
    field = "other_columns";
    if (const json::value* others = root.if_contains("other_columns")) {
      for (const json::value& n : others->as_array()) f.other_columns.emplace_back(n.as_string());
    }
    field = "columns";
    for (const json::value& cv : root.at("columns").as_array()) {
      const json::object& o = cv.as_object();
      FittedColumn c;
      c.name = std::string(o.at("name").as_string());
      field = "columns/" + c.name;
      const auto type = column_type_from_name(std::string(o.at("type").as_string()));
      if (!type || *type == ColumnType::kIgnored || *type == ColumnType::kText) throw DataError("preprocessing: column '" + c.name + "' has a bad type");
      c.type = *type;
      c.indicator = o.at("indicator").as_bool();
      if (const json::value* d = o.if_contains("dropped")) c.dropped = d->as_bool();
      if (const json::value* b = o.if_contains("bins"); b != nullptr && !c.dropped) {
        const auto bins = b->to_number<uint64_t>();
        if (bins == 0 || bins > kMaxHashBins) throw DataError("preprocessing: column '" + c.name + "' has bad bins");
        c.bins = static_cast<uint32_t>(bins);
        if (const json::value* n = o.if_contains("values")) {
          c.values = static_cast<uint32_t>(n->to_number<uint64_t>());
          c.separator = std::string(o.at("separator").as_string());
          if (c.values == 0 || c.values > kMaxValues || c.separator.empty() || c.type != ColumnType::kCategorical) {
            throw DataError("preprocessing: column '" + c.name + "' has bad values or separator");
          }
        }
      } else if (!c.dropped && c.type == ColumnType::kId) {
        c.ids = true;
        for (const json::value& k : o.at("vocabulary").as_array()) c.vocabulary.push_back(k.to_number<uint64_t>());
        const bool sorted = std::adjacent_find(c.vocabulary.begin(), c.vocabulary.end(), std::greater_equal<>()) == c.vocabulary.end();
        if (!sorted || c.vocabulary.size() > kMaxIdVocabulary || (!c.vocabulary.empty() && c.vocabulary.back() >= kFingerprintLimit)) {
          throw DataError("preprocessing: id column '" + c.name + "' has a bad vocabulary");
        }
      } else if (!c.dropped && c.type == ColumnType::kCategorical) {
        for (const json::value& k : o.at("categories").as_array()) c.categories.emplace_back(k.as_string());
        c.fill_category = static_cast<uint32_t>(o.at("fill_category").to_number<uint64_t>());
        if (const json::value* e = o.if_contains("encode")) c.ids = e->as_string() == "ids";
        if (c.fill_category > c.categories.size() || !std::is_sorted(c.categories.begin(), c.categories.end())) {
          throw DataError("preprocessing: column '" + c.name + "' has unsorted categories or a bad fill_category");
        }
      } else if (!c.dropped) {
        c.fill = static_cast<float>(o.at("fill").to_number<double>());
        c.offset = static_cast<float>(o.at("offset").to_number<double>());
        c.scale = static_cast<float>(o.at("scale").to_number<double>());
        if (!std::isfinite(c.fill) || !std::isfinite(c.offset) || !std::isfinite(c.scale)) {
          throw DataError("preprocessing: column '" + c.name + "' has a constant that is not finite");
        }
      }
      f.columns.push_back(std::move(c));
    }
    field = "crosses";
    if (const json::value* crosses = root.if_contains("crosses")) {
      for (const json::value& xv : crosses->as_array()) {
        const json::object& o = xv.as_object();
        FittedCross x{std::string(o.at("name").as_string()), {}, static_cast<uint32_t>(o.at("bins").to_number<uint64_t>())};
        if (x.bins == 0 || x.bins > kMaxHashBins) throw DataError("preprocessing: cross '" + x.name + "' has bad bins");
        for (const json::value& n : o.at("columns").as_array()) {
          const auto it = std::find_if(f.columns.begin(), f.columns.end(), [&](const FittedColumn& c) { return c.name == n.as_string(); });
          if (it == f.columns.end()) throw DataError("preprocessing: cross '" + x.name + "' names an unknown column");
          x.columns.push_back(static_cast<uint32_t>(it - f.columns.begin()));
        }
        if (x.columns.size() < 2) throw DataError("preprocessing: cross '" + x.name + "' has fewer than two columns");
        f.crosses.push_back(std::move(x));
      }
    }
    field = "text";
    if (const json::value* text = root.if_contains("text")) {
      if (!f.columns.empty()) throw DataError("preprocessing: a tokenizer and table columns together");
      f.text = std::make_shared<const FittedTokenizer>(fitted_tokenizer_from_json(json::serialize(*text)));
    }
    field = "text_columns";
    if (const json::value* texts = root.if_contains("text_columns")) {
      for (const json::value& tv : texts->as_array()) {
        const json::object& o = tv.as_object();
        FittedTextColumn t{std::string(o.at("name").as_string()),
                           std::make_shared<const FittedTokenizer>(fitted_tokenizer_from_json(json::serialize(o.at("tokenizer"))))};
        const bool taken = std::any_of(f.columns.begin(), f.columns.end(), [&](const FittedColumn& c) { return c.name == t.name; }) ||
                           std::any_of(f.text_columns.begin(), f.text_columns.end(), [&](const FittedTextColumn& u) { return u.name == t.name; });
        if (taken || f.text) throw DataError("preprocessing: text column '" + t.name + "' is named twice or beside a document tokenizer");
        f.text_columns.push_back(std::move(t));
      }
    }
  } catch (const DataError&) {
    throw;
  } catch (const std::exception& e) {
    throw DataError("preprocessing: not a fitted preprocessing (at " + field + "): " + e.what());
  }
  return f;
}

}  // namespace pstrain

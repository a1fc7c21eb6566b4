// The dataset routes of the REST API: the catalog's list and records, uploads (CSV, JSON Lines,
// NPZ, IDX pairs, archives of class folders of images: streamed to a staging file first, plan_dataset_upload), splits and deletes. Work that
// touches files runs on the catalog's thread; the answer comes from there.
#include <boost/json.hpp>

#include <map>
#include <optional>
#include <variant>

#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/http/responses.h"
#include "coordinator/http/rest_api.h"
#include "coordinator/store/job_json.h"

namespace pstrain {
namespace {

// A CSV upload's table parameters: ?sep=,|;|tab  ?types=name:type,...  ?missing=NA,,-
// (comma-separated; an empty item is the empty cell).
struct TableParams {
  char separator = 0;
  std::map<std::string, ColumnType> types;
  std::optional<std::vector<std::string>> missing;
  std::optional<std::pair<std::string, std::string>> error;  // (detail, parameter)
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

TableParams read_table_params(const std::map<std::string, std::string>& params) {
  TableParams t;
  if (const auto it = params.find("sep"); it != params.end()) {
    const std::string& v = it->second;
    if (v == "," || v == "comma") t.separator = ',';
    else if (v == ";" || v == "semicolon") t.separator = ';';
    else if (v == "\t" || v == "tab") t.separator = '\t';
    else t.error = {{"sep must be ',', ';' or tab (also: comma, semicolon), not '" + v + "'", "sep"}};
  }
  if (const auto it = params.find("types"); it != params.end() && !t.error) {
    for (const std::string& item : split_list(it->second)) {
      const size_t colon = item.rfind(':');
      const auto type = colon == std::string::npos ? std::nullopt : column_type_from_name(item.substr(colon + 1));
      if (colon == std::string::npos || colon == 0 || !type) {
        t.error = {{"types must be a list of column:type (types: numeric, categorical, boolean, id, text, ignore), not '" + item + "'",
                    "types"}};
        break;
      }
      t.types[item.substr(0, colon)] = *type;
    }
  }
  if (const auto it = params.find("missing"); it != params.end()) t.missing = split_list(it->second);
  return t;
}

// A class-folder upload's image parameters: ?image_size=H,W (or HxW; 1 to 4096 each)
// ?color_mode=grayscale|rgb|rgba.
struct ImageParams {
  uint32_t height = 0, width = 0;
  ColorMode color_mode = ColorMode::kRgb;
  std::optional<std::pair<std::string, std::string>> error;  // (detail, parameter)
};

ImageParams read_image_params(const std::map<std::string, std::string>& params) {
  ImageParams p;
  if (const auto it = params.find("image_size"); it != params.end()) {
    const std::string& v = it->second;
    const size_t sep = v.find_first_of(",x");
    const auto number = [](const std::string& text) -> uint32_t {
      if (text.empty() || text.size() > 4 || text.find_first_not_of("0123456789") != std::string::npos) return 0;
      const unsigned long n = std::stoul(text);
      return n <= 4096 ? static_cast<uint32_t>(n) : 0;
    };
    if (sep != std::string::npos) {
      p.height = number(v.substr(0, sep));
      p.width = number(v.substr(sep + 1));
    }
    if (p.height == 0 || p.width == 0) {
      p.height = p.width = 0;
      p.error = {{"image_size must be height,width (each 1 to 4096), not '" + v + "'", "image_size"}};
    }
  }
  if (const auto it = params.find("color_mode"); it != params.end()) {
    if (it->second == "grayscale") p.color_mode = ColorMode::kGrayscale;
    else if (it->second == "rgb") p.color_mode = ColorMode::kRgb;
    else if (it->second == "rgba") p.color_mode = ColorMode::kRgba;
    else p.error = {{"color_mode must be grayscale, rgb or rgba, not '" + it->second + "'", "color_mode"}};
  }
  return p;
}

// A dataset upload's route: PUT /v1/datasets/{name}/{split}[/images|/labels], from its captures.
struct UploadRoute {
  std::string name, split;
  DatasetCatalog::UploadPart part = DatasetCatalog::UploadPart::kWhole;
};
UploadRoute upload_route(const std::vector<std::string>& args) {
  UploadRoute r{args.at(0), args.at(1)};
  if (args.size() > 2) r.part = args[2] == "images" ? DatasetCatalog::UploadPart::kImages : DatasetCatalog::UploadPart::kLabels;
  return r;
}

// The upload's format from its media type and part; else a 415 naming what is accepted.
std::variant<DatasetCatalog::UploadFormat, HttpResponse> upload_format(const HttpRequest& request,
                                                                       DatasetCatalog::UploadPart part) {
  const std::string type = media_type(request.content_type);
  if (part != DatasetCatalog::UploadPart::kWhole) {
    if (type == "application/octet-stream" || type == "application/gzip" || type == "application/x-gzip" ||
        type == "application/x-idx") {
      return DatasetCatalog::UploadFormat::kIdx;
    }
    return problem(415, "unsupported-media-type", "Unsupported media type",
                   "an IDX file (gzip'd or plain) must be sent as application/octet-stream, application/gzip or "
                   "application/x-idx, not '" + request.content_type + "'",
                   "Content-Type");
  }
  if (type == "text/csv") return DatasetCatalog::UploadFormat::kCsv;
  if (type == "application/x-ndjson" || type == "application/jsonl" || type == "application/json-lines") {
    return DatasetCatalog::UploadFormat::kJsonl;
  }
  if (type == "application/x-npz") return DatasetCatalog::UploadFormat::kNpz;
  if (type == "application/zip" || type == "application/x-zip-compressed" || type == "application/x-tar" ||
      type == "application/tar") {
    return DatasetCatalog::UploadFormat::kArchive;
  }
  return problem(415, "unsupported-media-type", "Unsupported media type",
                 "a split must be sent as text/csv (CSV with a header row), application/x-ndjson (JSON Lines), "
                 "application/x-npz (NumPy .npz with arrays x and y), or application/zip or application/x-tar (class "
                 "folders of PNG or JPEG images), not '" + request.content_type + "'; IDX pairs go to .../images and .../labels",
                 "Content-Type");
}

// The list's form of a dataset: each categorical column's full category list left out (up to
// 65,536 names per column; its `distinct` count and `top` values stay), which
// GET /v1/datasets/{name} has.
boost::json::value listed(const std::string& dataset_text) {
  boost::json::value v = parse_json(dataset_text);
  if (boost::json::object* splits = v.as_object().if_contains("splits") ? &v.as_object()["splits"].as_object() : nullptr) {
    for (auto& split : *splits) {
      boost::json::object* table = split.value().as_object().if_contains("table")
                                       ? &split.value().as_object()["table"].as_object()
                                       : nullptr;
      if (table == nullptr || !table->contains("columns")) continue;
      for (boost::json::value& column : (*table)["columns"].as_array()) column.as_object().erase("categories");
    }
  }
  return v;
}

}  // namespace

std::vector<std::string> RestApi::jobs_using(const std::string& dataset) const {
  return jobs_using_dataset(store_.list(), dataset);
}

void RestApi::add_dataset_routes() {
  using Args = const std::vector<std::string>&;
  router_.add("GET", "/v1/datasets", [this](const HttpRequest&, Args, const Responder& respond) {
    boost::json::array list;
    for (const DatasetRecord& r : catalog_->list()) list.push_back(listed(dataset_json(r, jobs_using(r.name))));
    respond(json_response(200, to_json_text(boost::json::object{{"datasets", list}})));
  });
  router_.add("GET", "/v1/datasets/{name}", [this](const HttpRequest&, Args a, const Responder& respond) {
    const auto r = catalog_->get(a[0]);
    if (!r) return respond(problem(404, "dataset-not-found", "No such dataset", "there is no dataset '" + a[0] + "'"));
    respond(json_response(200, dataset_json(*r, jobs_using(a[0]))));
  });
  router_.add("DELETE", "/v1/datasets/{name}", [this](const HttpRequest&, Args a, const Responder& respond) {
    // Renames and a synced write: on the catalog's thread, not this one.
    catalog_->erase(a[0], [respond](std::optional<CatalogError> e) {
      if (e) return respond(service_problem(*e));
      HttpResponse r;
      r.status = 204;
      respond(std::move(r));
    });
  });
  router_.add("POST", "/v1/datasets/{name}/split", [this](const HttpRequest& request, Args a, const Responder& answer) {
    const std::string name = a[0];
    if (media_type(request.content_type) != "application/json") {
      return answer(problem(415, "unsupported-media-type", "Unsupported media type",
                            "send the split's options as application/json, not '" + request.content_type + "'"));
    }
    boost::system::error_code ec;
    const boost::json::value body = parse_json(request.body, ec);
    if (ec || !body.is_object()) {
      return answer(problem(400, "malformed-json", "Malformed JSON", "the body must be a JSON object"));
    }
    double fraction = 0.1;
    uint64_t seed = 1;
    for (const auto& field : body.as_object()) {
      if (field.key() == "test_fraction") {
        const auto& v = field.value();
        const double f = v.is_double() ? v.as_double() : v.is_int64() ? static_cast<double>(v.as_int64()) : -1;
        if (!(f > 0 && f < 1)) {
          return answer(problem(422, "invalid-split", "Invalid split", "/test_fraction must be a number in (0, 1)", "/test_fraction"));
        }
        fraction = f;
      } else if (field.key() == "seed") {
        if (!field.value().is_int64() || field.value().as_int64() < 0) {
          return answer(problem(422, "invalid-split", "Invalid split", "/seed must be a non-negative integer", "/seed"));
        }
        seed = static_cast<uint64_t>(field.value().as_int64());
      } else {
        // (Appended rather than "/" + key: GCC 12 warns falsely (-Wrestrict) about that form here.)
        std::string pointer = "/";
        pointer.append(field.key().data(), field.key().size());
        return answer(problem(422, "invalid-split", "Invalid split",
                              pointer + " is not a known field (known: test_fraction, seed)", pointer));
      }
    }
    catalog_->split(name, fraction, seed, [this, answer, name](DatasetCatalog::SplitResult result) {
      if (result.error) return answer(service_problem(*result.error));
      answer(json_response(200, dataset_json(*result.record, jobs_using(name))));
    });
  });
  auto upload = [this](const HttpRequest& request, Args a, const Responder& answer) {
    if (request.body_file.empty()) {
      // Not streamed (the plan said otherwise): only a rejected plan gets here, or a test.
      return answer(problem(400, "bad-request", "Bad request", "the upload's body was not received"));
    }
    const UploadRoute route_value = upload_route(a);
    const UploadRoute* route = &route_value;
    const auto format = upload_format(request, route->part);
    DatasetCatalog::Upload upload;
    upload.name = route->name;
    upload.split = route->split;
    upload.part = route->part;
    upload.format = std::get<DatasetCatalog::UploadFormat>(format);  // plan_body checked it
    const auto params = query_params(request.target);
    if (const auto it = params.find("label"); it != params.end()) upload.label_column = it->second;
    if (const auto it = params.find("replace"); it != params.end()) upload.replace = it->second == "true";
    if (const auto it = params.find("task"); it != params.end()) upload.regression = it->second == "regression";
    // (plan_dataset_upload checked sep, types and missing.)
    const TableParams table = read_table_params(params);
    upload.separator = table.separator;
    upload.types = table.types;
    upload.missing = table.missing;
    const ImageParams image = read_image_params(params);  // (checked by plan_dataset_upload)
    upload.image_height = image.height;
    upload.image_width = image.width;
    upload.color_mode = image.color_mode;
    upload.body_path = request.body_file;
    upload.body_bytes = request.body_bytes;
    upload.body_sha256 = request.body_sha256;
    const std::string name = route->name;
    catalog_->ingest(std::move(upload), [this, answer, name, bytes = request.body_bytes,
                                         sha = request.body_sha256](DatasetCatalog::UploadResult result) {
      if (result.error) return answer(service_problem(*result.error));
      if (result.status == 202) {
        return answer(json_response(202, to_json_text(boost::json::object{{"name", name},
                                                                          {"waiting_for", result.waiting_for},
                                                                          {"received_bytes", bytes},
                                                                          {"sha256", sha}})));
      }
      boost::json::object body = parse_json(dataset_json(*result.record, jobs_using(name))).as_object();
      body["upload"] = boost::json::object{{"bytes", bytes}, {"sha256", sha}};
      HttpResponse r = json_response(result.status, to_json_text(body));
      r.headers.emplace_back("Location", "/v1/datasets/" + name);
      answer(std::move(r));
    });
  };
  router_.add("PUT", "/v1/datasets/{name}/{split}", upload);
  router_.add("PUT", "/v1/datasets/{name}/{split}/{part:images|labels}", upload);
}

BodyPlan RestApi::plan_dataset_upload(const HttpRequest& head, const Router::Match& match) {
  BodyPlan plan;
  const UploadRoute route_value = upload_route(match.args);
  const UploadRoute* route = &route_value;
  auto reject = [&](HttpResponse r) {
    count(match.label, r.status);
    plan.kind = BodyPlan::Kind::kReject;
    r.close = true;  // the body is never read: the connection cannot carry another request
    plan.reject = std::move(r);
    return plan;
  };
  const auto params = query_params(head.target);
  for (const auto& [key, value] : params) {
    const bool whole = route->part == DatasetCatalog::UploadPart::kWhole;
    const bool table_param = key == "label" || key == "task" || key == "sep" || key == "types" || key == "missing" ||
                             key == "image_size" || key == "color_mode";
    if (key != "replace" && !(table_param && whole)) {
      return reject(problem(400, "unknown-parameter", "Unknown query parameter",
                            "'" + key + "' is not a parameter of this upload (known: replace" +
                                (whole ? ", label, task, sep, types, missing, image_size, color_mode" : "") + ")",
                            key));
    }
  }
  if (const TableParams table = read_table_params(params); table.error) {
    return reject(problem(400, "invalid-parameter", "Invalid query parameter", table.error->first, table.error->second));
  }
  if (const ImageParams image = read_image_params(params); image.error) {
    return reject(problem(400, "invalid-parameter", "Invalid query parameter", image.error->first, image.error->second));
  }
  if (const auto it = params.find("task"); it != params.end() && it->second != "regression" &&
                                            it->second != "classification") {
    return reject(problem(400, "invalid-parameter", "Invalid query parameter",
                          "task must be regression or classification, not \"" + it->second + "\"", "task"));
  }
  bool replace = false;
  if (const auto it = params.find("replace"); it != params.end()) {
    if (it->second != "true" && it->second != "false") {
      return reject(problem(400, "invalid-parameter", "Invalid query parameter",
                            "replace must be true or false, not '" + it->second + "'", "replace"));
    }
    replace = it->second == "true";
  }
  if (const auto e = catalog_->precheck(route->name, route->split, replace)) return reject(service_problem(*e));
  const auto format = upload_format(head, route->part);
  if (const auto* r = std::get_if<HttpResponse>(&format)) return reject(*r);
  const uint64_t max = catalog_->options().max_upload_bytes;
  if (head.content_length && *head.content_length > max) {
    return reject(problem(413, "body-too-large", "Body too large",
                          "the upload has " + std::to_string(*head.content_length) + " bytes; the limit is " +
                              std::to_string(max) + " (coordinator flag --max-upload-bytes)"));
  }
  plan.kind = BodyPlan::Kind::kFile;
  plan.path = catalog_->new_staging_path();
  plan.max_bytes = max;
  return plan;
}

}  // namespace pstrain

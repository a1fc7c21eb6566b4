// Link stubs for the REST target: RestApi calls the dataset catalog, the model service and the
// web UI only through pointers that the target leaves null (so those routes answer 404), but
// rest_api.cc still names their functions. Defining them here keeps the fuzz library small (the
// real ones pull in the engine, the catalog's thread and the embedded dashboard). Each aborts:
// if the fuzzer ever reaches one, the target is wrong, and it says so.
#include <cstdio>
#include <cstdlib>

#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/http/web_ui.h"
#include "coordinator/models/model_service.h"

namespace pstrain {
namespace {
[[noreturn]] void unreachable(const char* what) {
  std::fprintf(stderr, "rest fuzz target: %s reached, but the API has no catalog, models or web UI\n", what);
  std::abort();
}
}  // namespace

std::vector<DatasetRecord> DatasetCatalog::list() const { unreachable("DatasetCatalog::list"); }
std::optional<DatasetRecord> DatasetCatalog::get(const std::string&) const { unreachable("DatasetCatalog::get"); }
bool DatasetCatalog::with_dataset(const std::string&, std::string*, const std::function<void(const DatasetInfo&)>&) {
  unreachable("DatasetCatalog::with_dataset");
}
std::optional<DatasetInfo> DatasetCatalog::info(const std::string&, std::string*) const {
  unreachable("DatasetCatalog::info");
}
std::optional<CatalogError> DatasetCatalog::precheck(const std::string&, const std::string&, bool) const {
  unreachable("DatasetCatalog::precheck");
}
std::string DatasetCatalog::new_staging_path() { unreachable("DatasetCatalog::new_staging_path"); }
void DatasetCatalog::ingest(Upload, std::function<void(UploadResult)>) { unreachable("DatasetCatalog::ingest"); }
void DatasetCatalog::split(const std::string&, double, uint64_t, std::function<void(SplitResult)>) {
  unreachable("DatasetCatalog::split");
}
void DatasetCatalog::erase(const std::string&, std::function<void(std::optional<CatalogError>)>) {
  unreachable("DatasetCatalog::erase");
}
std::string dataset_json(const DatasetRecord&, const std::vector<std::string>&) { unreachable("dataset_json"); }

void ModelService::predict(const std::string&, std::string, Done) { unreachable("ModelService::predict"); }
void ModelService::evaluate(const std::string&, std::string, Done, bool) { unreachable("ModelService::evaluate"); }
void ModelService::checkpoint(const std::string&, const std::string&, bool, Done) {
  unreachable("ModelService::checkpoint");
}
void ModelService::upload(Upload, Done) { unreachable("ModelService::upload"); }
void ModelService::file(const std::string&, Done) { unreachable("ModelService::file"); }
void ModelService::onnx(const std::string&, std::optional<std::string>, Done) { unreachable("ModelService::onnx"); }
void ModelService::erase(const std::string&, Done) { unreachable("ModelService::erase"); }

bool WebUi::is_web_path(const std::string&) { unreachable("WebUi::is_web_path"); }
HttpResponse WebUi::get(const std::string&, const std::string&) const { unreachable("WebUi::get"); }
}  // namespace pstrain

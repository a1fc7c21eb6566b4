#include "common/data/dataset_formats.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <exception>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "common/data/format_parts.h"

namespace pstrain {

void ExampleSink::targets(const float*, size_t) {
  throw DatasetFormatError(DatasetFormatError::Kind::kBadDtype,
                           "float targets (a regression dataset) cannot be used here: it takes class labels only");
}

static_assert(std::endian::native == std::endian::little,
              "ParsedExamples and .npy data are little-endian; a big-endian host needs byte swaps");

using namespace format_detail;


uint64_t ParsedExamples::example_values() const {
  uint64_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

std::string_view format_error_kind_name(DatasetFormatError::Kind kind) {
  switch (kind) {
    case Kind::kUnreadable: return "unreadable";
    case Kind::kEmpty: return "empty";
    case Kind::kBadHeader: return "bad_header";
    case Kind::kDuplicateColumn: return "duplicate_column";
    case Kind::kMissingLabelColumn: return "missing_label_column";
    case Kind::kQuotedField: return "quoted_field";
    case Kind::kRaggedRow: return "ragged_row";
    case Kind::kNotNumeric: return "not_numeric";
    case Kind::kNonFinite: return "non_finite";
    case Kind::kBadLabel: return "bad_label";
    case Kind::kTooFewClasses: return "too_few_classes";
    case Kind::kTooLarge: return "too_large";
    case Kind::kBadNpyHeader: return "bad_npy_header";
    case Kind::kFortranOrder: return "fortran_order";
    case Kind::kBadDtype: return "bad_dtype";
    case Kind::kBadRank: return "bad_rank";
    case Kind::kMissingArray: return "missing_array";
    case Kind::kLengthMismatch: return "length_mismatch";
    case Kind::kTruncated: return "truncated";
    case Kind::kTrailingData: return "trailing_data";
    case Kind::kBadEncoding: return "bad_encoding";
    case Kind::kBadRecord: return "bad_record";
    case Kind::kBadImage: return "bad_image";
    case Kind::kBadFolders: return "bad_folders";
  }
  return "unknown";
}

}  // namespace pstrain

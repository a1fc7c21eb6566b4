// The OpenAPI 3 document of the REST API (docs/openapi.json, compiled in).
#pragma once

namespace pstrain {
const char* openapi_document();
}

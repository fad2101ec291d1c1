// Base64 for NDJSON output chunks (binary process output inside JSON), shared by spaced and the CLI.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace space::http {

std::string base64Encode(std::string_view in);
Result<std::string> base64Decode(std::string_view in);

}  // namespace space::http

// Request errors tagged with the request field at fault (by the API parsers and by
// SamplingParams::Validate), so the HTTP edge can fill OpenAI's
// "param". Tested by tests/openai_json_test.cc.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// InvalidArgument(message), tagged with `field` (e.g. "temperature", "messages[2].role").
// The message itself should name the field too: it is all a gRPC client sees.
absl::Status FieldError(absl::string_view field, absl::string_view message);

// The field a FieldError was tagged with; nullopt for any other status.
std::optional<std::string> ErrorField(const absl::Status& status);

}  // namespace tpserve

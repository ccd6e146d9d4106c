// FieldError / ErrorField. Tested by tests/openai_json_test.cc and tests/sampling_params_test.cc.
#include "coordinator/engine/field_error.h"

#include "absl/strings/cord.h"

namespace tpserve {
namespace {

constexpr char kFieldPayloadUrl[] = "type.tpserve.dev/request-field";

}  // namespace

absl::Status FieldError(absl::string_view field, absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kFieldPayloadUrl, absl::Cord(field));
  return status;
}

std::optional<std::string> ErrorField(const absl::Status& status) {
  auto field = status.GetPayload(kFieldPayloadUrl);  // absl::optional: Debian's absl is not std-aliased
  if (!field.has_value()) return std::nullopt;
  return std::string(*field);
}

}  // namespace tpserve

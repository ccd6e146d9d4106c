// The global functions transformers gives chat templates: range, namespace, dict,
// raise_exception and strftime_now. Tested by tests/chat_template_test.cc.
#pragma once

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve::chat_template_internal {

// Errors raised by the template's raise_exception() carry this payload, so that callers
// can tell a template's own refusal from an interpreter error.
inline constexpr char kRaisedByTemplatePayload[] = "tpserve.chat_template.raise_exception";

// Adds the globals to `globals`; strftime_now() formats `now` in `time_zone`.
void AddGlobals(absl::Time now, absl::TimeZone time_zone, Object* globals);

}  // namespace tpserve::chat_template_internal

// Finds string fields that are not UTF-8 in a serialized protobuf message before it is parsed:
// proto3's parser refuses such a message, logs an ERROR, and gRPC's callback API then fails the
// call as UNIMPLEMENTED. The gRPC front end checks Generate requests with this first, so the
// client gets INVALID_ARGUMENT naming the field. Tested by tests/frontend_test.cc.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace tpserve {

// INVALID_ARGUMENT naming the first string field of `type` (nested messages and repeated
// fields included, e.g. "chat.messages[1].content") whose bytes in `wire` are not valid UTF-8
// by protobuf's own rule; OK otherwise, also when `wire` does not parse (the parser then says so).
absl::Status CheckStringFieldsAreUtf8(absl::string_view wire, const google::protobuf::Descriptor& type);

}  // namespace tpserve

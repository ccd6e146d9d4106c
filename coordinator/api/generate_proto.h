// GenerateInput (the front ends' common request) <-> tpserve.v1.GenerateRequest, both ways: the
// gRPC server reads requests with GenerateInputFromProto; the router sends an OpenAI request to
// a grpc:// backend with GenerateRequestFromInput, which refuses what the proto cannot carry.
// Tested by tests/generate_proto_test.cc (the round trip) and tests/frontend_test.cc.
#pragma once

#include "absl/status/statusor.h"
#include "coordinator/api/request_builder.h"
#include "proto/tpserve.pb.h"

namespace tpserve {

// A GenerateRequest as the front ends' common input. INVALID_ARGUMENT (naming the field)
// when no prompt is set.
absl::StatusOr<GenerateInput> GenerateInputFromProto(const v1::GenerateRequest& request);

// The GenerateRequest that GenerateInputFromProto reads back as `input` (model included). A
// field the proto has no room for is INVALID_ARGUMENT naming it and saying why, never left
// out: add_generation_prompt false, chat_template_kwargs, a message's keys beside "role" and
// "content" (an assistant's tool_calls, a tool result's tool_call_id, "name") or content that
// is not a string, skip_special_tokens false, a logit_bias id given twice, a named tool_choice
// spelled like a keyword ("auto", "none", "required").
absl::StatusOr<v1::GenerateRequest> GenerateRequestFromInput(const GenerateInput& input);

}  // namespace tpserve

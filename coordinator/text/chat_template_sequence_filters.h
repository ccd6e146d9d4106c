// Jinja's filters over sequences and mappings (first, join, map, select, sort, dictsort,
// ...), registered by chat_template_filters.cc. Tested by tests/chat_template_test.cc.
#pragma once

#include "absl/status/statusor.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve::chat_template_internal {

absl::StatusOr<Value> FilterFirstLast(const Value& v, bool last, CallArgs args);

absl::StatusOr<Value> FilterJoin(const Value& v, CallArgs args);

absl::StatusOr<Value> FilterItems(const Value& v, CallArgs args);

absl::StatusOr<Value> FilterDictsort(const Value& v, CallArgs args);

absl::StatusOr<Value> FilterList(const Value& v, CallArgs args);

absl::StatusOr<Value> FilterMap(const Value& v, CallArgs args);

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> SelectOrReject(const Value& v, CallArgs args, bool select, bool attr);

absl::StatusOr<Value> FilterSort(const Value& v, CallArgs args);

absl::StatusOr<Value> FilterUnique(const Value& v, CallArgs args);

absl::StatusOr<Value> FilterMinMax(const Value& v, CallArgs args, bool max);

absl::StatusOr<Value> FilterReverse(const Value& v, CallArgs args);

absl::StatusOr<Value> FilterSum(const Value& v, CallArgs args);

}  // namespace tpserve::chat_template_internal

// CheckStringFieldsAreUtf8: a walk over the wire format, guided by the descriptor. Tested by
// tests/frontend_test.cc.
#include "coordinator/api/proto_utf8.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/engine/field_error.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/wire_format_lite.h"

namespace tpserve {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr int kMaxDepth = 64;  // deeper nesting is left to the parser (whose own limit is 100)

class Walker {
 public:
  // The first string field that is not UTF-8, once Message() returned.
  const std::optional<std::string>& bad() const { return bad_; }

  // Walks one message's bytes; `prefix` is its path with a trailing '.', empty at the top.
  // False when the bytes do not parse as `type` (the walk stops; the parser will say why).
  bool Message(absl::string_view wire, const Descriptor& type, const std::string& prefix, int depth) {
    CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()), static_cast<int>(wire.size()));
    std::map<int, int> seen;  // occurrences of each field so far: a repeated field's index
    while (!bad_) {
      const uint32_t tag = in.ReadTag();
      if (tag == 0) return true;  // the end (or a bad tag: the parser reports it)
      const FieldDescriptor* field = type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
      const bool delimited = WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
      if (field == nullptr || !delimited ||
          (field->type() != FieldDescriptor::TYPE_STRING && field->type() != FieldDescriptor::TYPE_MESSAGE)) {
        if (!WireFormatLite::SkipField(&in, tag)) return false;
        continue;
      }
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return false;
      const size_t start = static_cast<size_t>(in.CurrentPosition());
      if (length > wire.size() - start || !in.Skip(static_cast<int>(length))) return false;
      const absl::string_view value = wire.substr(start, length);
      std::string path = absl::StrCat(prefix, field->name());
      const int index = seen[field->number()]++;
      if (field->is_repeated()) absl::StrAppend(&path, "[", index, "]");
      if (field->type() == FieldDescriptor::TYPE_STRING) {
        if (!google::protobuf::internal::IsStructurallyValidUTF8(value.data(), static_cast<int>(value.size()))) {
          bad_ = std::move(path);
        }
      } else if (depth < kMaxDepth && !Message(value, *field->message_type(), path + ".", depth + 1)) {
        return false;
      }
    }
    return true;
  }

 private:
  std::optional<std::string> bad_;
};

}  // namespace

absl::Status CheckStringFieldsAreUtf8(absl::string_view wire, const Descriptor& type) {
  Walker walker;
  walker.Message(wire, type, "", 0);
  if (!walker.bad()) return absl::OkStatus();
  const std::string& field = *walker.bad();
  return FieldError(field, absl::StrCat(field, " is not valid UTF-8: protobuf string fields must hold UTF-8 text",
                                        field == "text" ? " (to send arbitrary tokens, use token_ids)" : ""));
}

}  // namespace tpserve

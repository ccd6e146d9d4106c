// Post-processors of the tokenizer.json pipeline (single-sequence encodings only).
// Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_post_processor.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kernels/base.h"

namespace tpserve::tokenizer_internal {
namespace {

// Adds `prefix` before and `suffix` after the sequence (TemplateProcessing's single
// template, BertProcessing and RobertaProcessing all reduce to this).
class WrapProcessor : public PostProcessor {
 public:
  WrapProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void Process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    ids->insert(ids->begin(), prefix_.begin(), prefix_.end());
    ids->insert(ids->end(), suffix_.begin(), suffix_.end());
  }
  std::optional<int32_t> LeadingId() const override {
    if (prefix_.size() == 1) return prefix_[0];
    return std::nullopt;
  }

 private:
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

class NoOpProcessor : public PostProcessor {
 public:
  void Process(std::vector<int32_t>*, bool) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void Process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->Process(ids, add_special_tokens);
  }
  std::optional<int32_t> LeadingId() const override {
    std::optional<int32_t> lead;
    for (const auto& step : steps_) {
      if (auto id = step->LeadingId()) lead = id;
    }
    return lead;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

absl::StatusOr<std::unique_ptr<PostProcessor>> ParseTemplate(const Json& j, const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(const Json* single, RequireArray(j, "single", at));
  const auto specials = j.find("special_tokens");
  absl::flat_hash_map<std::string, std::vector<int32_t>> special_ids;
  if (specials != j.end() && specials->is_object()) {
    for (const auto& [name, spec] : specials->items()) {
      const JsonPath spec_at = at.Field("special_tokens").Field(name);
      TP_ASSIGN_OR_RETURN(const Json* ids, RequireArray(spec, "ids", spec_at));
      std::vector<int32_t>& out = special_ids[name];
      for (const auto& id : *ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          return spec_at.Field("ids").Error(
              absl::StrCat("expected non-negative token ids, got ", id.dump()));
        }
        out.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    }
  }
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    const JsonPath piece_at = at.Field("single").Index(i);
    if (const auto seq = piece.find("Sequence"); piece.is_object() && seq != piece.end()) {
      const auto id_it = seq->is_object() ? seq->find("id") : seq->end();
      if (!seq->is_object() || (id_it != seq->end() && !id_it->is_string())) {
        return piece_at.Error(R"(expected {"Sequence": {"id": "A", "type_id": 0}})");
      }
      const std::string id = id_it == seq->end() ? "A" : id_it->get<std::string>();
      if (id != "A") {
        return piece_at.Error(
            absl::StrCat("a single-sequence template cannot use sequence \"", id, "\""));
      }
      if (seen_sequence) return piece_at.Error("the single template uses sequence A twice");
      seen_sequence = true;
      continue;
    }
    const auto tok = piece.is_object() ? piece.find("SpecialToken") : piece.end();
    if (tok == piece.end() || !tok->is_object()) {
      return piece_at.Error(absl::StrCat(
          R"(expected {"Sequence": ...} or {"SpecialToken": ...}, got )", piece.dump()));
    }
    TP_ASSIGN_OR_RETURN(const std::string name,
                        RequireString(*tok, "id", piece_at.Field("SpecialToken")));
    const auto found = special_ids.find(name);
    if (found == special_ids.end()) {
      return at.Field("special_tokens")
          .Error(absl::StrCat("no entry for \"", name, "\", which the single template uses"));
    }
    auto& dst = seen_sequence ? suffix : prefix;
    dst.insert(dst.end(), found->second.begin(), found->second.end());
  }
  if (!seen_sequence)
    return at.Field("single").Error("the template has no {\"Sequence\": {\"id\": \"A\"}} piece");
  return std::make_unique<WrapProcessor>(std::move(prefix), std::move(suffix));
}

// BertProcessing/RobertaProcessing store their tokens as ["[CLS]", 101].
absl::StatusOr<int32_t> ParseTokenPair(const Json& j, std::string_view key, const JsonPath& at) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
    return at.Field(key).Error("expected [\"token\", id]");
  }
  return static_cast<int32_t>((*it)[1].get<int64_t>());
}

}  // namespace

std::unique_ptr<PostProcessor> MakeWrapProcessor(std::vector<int32_t> prefix,
                                                 std::vector<int32_t> suffix) {
  return std::make_unique<WrapProcessor>(std::move(prefix), std::move(suffix));
}

absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const Json& j,
                                                                  const JsonPath& at) {
  TP_ASSIGN_OR_RETURN(const std::string type, RequireType(j, at));
  if (type == "TemplateProcessing") return ParseTemplate(j, at);
  if (type == "ByteLevel") return std::make_unique<NoOpProcessor>();
  if (type == "Sequence") {
    TP_ASSIGN_OR_RETURN(const Json* list, RequireArray(j, "processors", at));
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      TP_ASSIGN_OR_RETURN(auto step,
                          ParsePostProcessor((*list)[i], at.Field("processors").Index(i)));
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    TP_ASSIGN_OR_RETURN(const int32_t cls, ParseTokenPair(j, "cls", at));
    TP_ASSIGN_OR_RETURN(const int32_t sep, ParseTokenPair(j, "sep", at));
    return std::make_unique<WrapProcessor>(std::vector<int32_t>{cls}, std::vector<int32_t>{sep});
  }
  return at.Error(absl::StrCat("unsupported post_processor type \"", type,
                               "\" (supported: TemplateProcessing, Sequence, ByteLevel, "
                               "BertProcessing, RobertaProcessing)"));
}

}  // namespace tpserve::tokenizer_internal

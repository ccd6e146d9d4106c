// StepPlan serialization: a flat little-endian int32 stream. Tested by tests/model_test.cc.
#include "worker/step.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

void PutVec(std::vector<int32_t>& out, const std::vector<int32_t>& v) {
  out.push_back(static_cast<int32_t>(v.size()));
  out.insert(out.end(), v.begin(), v.end());
}

bool GetVec(const int32_t*& p, const int32_t* end, std::vector<int32_t>& v) {
  if (p >= end) return false;
  const int32_t n = *p++;
  if (n < 0 || end - p < n) return false;
  v.assign(p, p + n);
  p += n;
  return true;
}

void PutRows(std::vector<int32_t>& w, const std::vector<RowSampling>& rows) {
  static_assert(sizeof(RowSampling) % 4 == 0 && std::is_trivially_copyable_v<RowSampling>);
  constexpr size_t kWords = sizeof(RowSampling) / 4;
  w.push_back(static_cast<int32_t>(rows.size()));
  const size_t at = w.size();
  w.resize(at + rows.size() * kWords);
  if (!rows.empty()) std::memcpy(w.data() + at, rows.data(), rows.size() * sizeof(RowSampling));
}

bool GetRows(const int32_t*& p, const int32_t* end, std::vector<RowSampling>& rows) {
  constexpr int64_t kWords = sizeof(RowSampling) / 4;
  if (p >= end) return false;
  const int32_t n = *p++;
  if (n < 0 || (end - p) / kWords < n) return false;
  rows.resize(n);
  if (n > 0) std::memcpy(static_cast<void*>(rows.data()), p, n * sizeof(RowSampling));
  p += n * kWords;
  return true;
}

// The sampling rows, their penalty entries and one word of flags (bit 0 return_logits,
// bit 1 host_sampling): the tail of both messages.
void PutSampling(std::vector<int32_t>& w, const std::vector<RowSampling>& rows, const std::vector<int32_t>& offsets,
                 const std::vector<int32_t>& tokens, const std::vector<int32_t>& counts, bool return_logits,
                 bool host_sampling) {
  PutRows(w, rows);
  PutVec(w, offsets);
  PutVec(w, tokens);
  PutVec(w, counts);
  w.push_back((return_logits ? 1 : 0) | (host_sampling ? 2 : 0));
}

// Reads the tail PutSampling wrote, which must end the message.
bool GetSampling(const int32_t*& p, const int32_t* end, std::vector<RowSampling>& rows, std::vector<int32_t>& offsets,
                 std::vector<int32_t>& tokens, std::vector<int32_t>& counts, bool& return_logits,
                 bool& host_sampling) {
  if (!GetRows(p, end, rows) || !GetVec(p, end, offsets) || !GetVec(p, end, tokens) || !GetVec(p, end, counts) ||
      end - p != 1 || (*p & ~3) != 0) {
    return false;
  }
  return_logits = (*p & 1) != 0;
  host_sampling = (*p & 2) != 0;
  ++p;
  return true;
}

std::vector<uint8_t> ToBytes(const std::vector<int32_t>& w) {
  std::vector<uint8_t> bytes(w.size() * 4);
  std::memcpy(bytes.data(), w.data(), bytes.size());
  return bytes;
}

}  // namespace

int32_t StepMessageKind(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 4 || bytes.size() % 4 != 0) return -1;
  int32_t kind;
  std::memcpy(&kind, bytes.data(), 4);
  return kind;
}

int64_t StepDelta::num_logit_rows() const {
  if (sampled_counts.empty()) return static_cast<int64_t>(sampled_rows.size());
  int64_t n = 0;
  for (int32_t c : sampled_counts) n += c;
  return n;
}

std::vector<uint8_t> StepDelta::Serialize() const {
  std::vector<int32_t> w;
  w.reserve(16 + table_edits.size() + slots.size() * 3 + token_ids.size() + sampling.size() * 12 +
            penalty_tokens.size() * 2);
  w.push_back(static_cast<int32_t>(StepPlan::Kind::kDelta));
  for (const auto* v : {&removed_slots, &added_slots, &table_edits, &slots, &starts, &num_tokens, &token_ids,
                        &sampled_rows, &sampled_counts}) {
    PutVec(w, *v);
  }
  PutSampling(w, sampling, penalty_offsets, penalty_tokens, penalty_counts, return_logits, samples_on_host());
  return ToBytes(w);
}

absl::StatusOr<StepDelta> StepDelta::Deserialize(const std::vector<uint8_t>& bytes) {
  if (StepMessageKind(bytes) != static_cast<int32_t>(StepPlan::Kind::kDelta)) {
    return absl::DataLossError("step delta: not a delta message");
  }
  std::vector<int32_t> w(bytes.size() / 4);
  std::memcpy(w.data(), bytes.data(), bytes.size());
  const int32_t* p = w.data() + 1;
  const int32_t* end = w.data() + w.size();
  StepDelta d;
  bool ok = true;
  for (auto* v : {&d.removed_slots, &d.added_slots, &d.table_edits, &d.slots, &d.starts, &d.num_tokens, &d.token_ids,
                  &d.sampled_rows, &d.sampled_counts}) {
    ok = ok && GetVec(p, end, *v);
  }
  if (!ok || !GetSampling(p, end, d.sampling, d.penalty_offsets, d.penalty_tokens, d.penalty_counts,
                          d.return_logits, d.host_sampling)) {
    return absl::DataLossError("step delta: malformed message");
  }
  return d;
}

std::vector<uint8_t> DraftDelta::Serialize() const {
  std::vector<int32_t> w;
  w.reserve(8 + table_edits.size() + slots.size() * 4);
  w.push_back(static_cast<int32_t>(StepPlan::Kind::kDraft));
  w.push_back(num_steps);
  for (const auto* v : {&table_edits, &slots, &hidden_rows, &token_ids, &positions}) PutVec(w, *v);
  return ToBytes(w);
}

absl::StatusOr<DraftDelta> DraftDelta::Deserialize(const std::vector<uint8_t>& bytes) {
  if (StepMessageKind(bytes) != static_cast<int32_t>(StepPlan::Kind::kDraft) || bytes.size() < 8) {
    return absl::DataLossError("draft delta: not a draft message");
  }
  std::vector<int32_t> w(bytes.size() / 4);
  std::memcpy(w.data(), bytes.data(), bytes.size());
  const int32_t* p = w.data() + 1;
  const int32_t* end = w.data() + w.size();
  DraftDelta d;
  d.num_steps = *p++;
  bool ok = true;
  for (auto* v : {&d.table_edits, &d.slots, &d.hidden_rows, &d.token_ids, &d.positions}) ok = ok && GetVec(p, end, *v);
  const size_t n = d.slots.size();
  if (!ok || p != end || d.num_steps < 1 || d.hidden_rows.size() != n || d.token_ids.size() != n ||
      d.positions.size() != n) {
    return absl::DataLossError("draft delta: malformed message");
  }
  return d;
}

std::vector<uint8_t> StepPlan::Serialize() const {
  std::vector<int32_t> w;
  w.reserve(8 + token_ids.size() * 5 + logit_rows.size());
  w.push_back(static_cast<int32_t>(kind));
  w.push_back(num_seqs);
  w.push_back(static_cast<int32_t>(kv.size()));
  PutVec(w, token_ids);
  PutVec(w, positions);
  PutVec(w, token_seq);
  for (const KvGroupPlan& g : kv) {
    w.push_back(g.max_blocks_per_seq);
    PutVec(w, g.slot_mapping);
    PutVec(w, g.block_tables);
  }
  PutVec(w, logit_rows);
  PutSampling(w, sampling, penalty_offsets, penalty_tokens, penalty_counts, return_logits, samples_on_host());
  return ToBytes(w);
}

absl::StatusOr<StepPlan> StepPlan::Deserialize(const std::vector<uint8_t>& bytes) {
  if (bytes.size() % 4 != 0 || bytes.size() < 12) return absl::DataLossError("step plan: truncated message");
  std::vector<int32_t> w(bytes.size() / 4);
  std::memcpy(w.data(), bytes.data(), bytes.size());
  const int32_t* p = w.data();
  const int32_t* end = p + w.size();
  StepPlan s;
  s.kind = static_cast<Kind>(*p++);
  s.num_seqs = *p++;
  const int32_t groups = *p++;
  if (groups < 0 || groups > 16) return absl::DataLossError("step plan: malformed message");
  bool ok = GetVec(p, end, s.token_ids) && GetVec(p, end, s.positions) && GetVec(p, end, s.token_seq);
  s.kv.resize(groups);
  for (KvGroupPlan& g : s.kv) {
    if (!ok || p >= end) {
      ok = false;
      break;
    }
    g.max_blocks_per_seq = *p++;
    ok = GetVec(p, end, g.slot_mapping) && GetVec(p, end, g.block_tables);
  }
  if (!ok || !GetVec(p, end, s.logit_rows) ||
      !GetSampling(p, end, s.sampling, s.penalty_offsets, s.penalty_tokens, s.penalty_counts, s.return_logits,
                   s.host_sampling)) {
    return absl::DataLossError("step plan: malformed message");
  }
  return s;
}

void LogitEdits::clear() {
  bias_offsets.clear();
  bias_tokens.clear();
  bias_values.clear();
  mask_index.clear();
  masks.clear();
}

absl::Status LogitEdits::Validate(int64_t rows, int64_t vocab) const {
  if (!bias_offsets.empty()) {
    if (static_cast<int64_t>(bias_offsets.size()) != rows + 1 || bias_offsets.front() != 0 ||
        bias_tokens.size() != bias_values.size() || static_cast<size_t>(bias_offsets.back()) != bias_tokens.size() ||
        !std::is_sorted(bias_offsets.begin(), bias_offsets.end())) {
      return absl::InvalidArgumentError("step plan: malformed logit bias entries");
    }
    for (int32_t id : bias_tokens) {
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("logit bias token id ", id, " is outside the vocabulary"));
      }
    }
  } else if (!bias_tokens.empty() || !bias_values.empty()) {
    return absl::InvalidArgumentError("step plan: logit bias entries without offsets");
  }
  if (mask_index.empty()) {
    if (!masks.empty()) return absl::InvalidArgumentError("step plan: token masks without a row index");
    return absl::OkStatus();
  }
  const int64_t words = mask_words(vocab);
  if (static_cast<int64_t>(mask_index.size()) != rows || masks.size() % words != 0) {
    return absl::InvalidArgumentError("step plan: malformed token masks");
  }
  const int64_t num_masks = static_cast<int64_t>(masks.size()) / words;
  for (int32_t m : mask_index) {
    if (m < -1 || m >= num_masks) return absl::InvalidArgumentError(absl::StrCat("step plan: token mask ", m));
  }
  return absl::OkStatus();
}

absl::Status StepPlan::ValidateTokenIds(int64_t vocab_size) const {
  for (const auto* ids : {&token_ids, &penalty_tokens}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
      }
    }
  }
  if (!edits.empty() && sampling.empty()) return absl::InvalidArgumentError("step plan: logit edits without sampling rows");
  return edits.Validate(static_cast<int64_t>(logit_rows.size()), vocab_size);
}

absl::Status StepPlan::Validate(const std::vector<int64_t>& num_blocks, int32_t block_size) const {
  const size_t t = token_ids.size();
  if (positions.size() != t || token_seq.size() != t) {
    return absl::InvalidArgumentError("step plan: per-token arrays differ in length");
  }
  if (num_seqs < 0) return absl::InvalidArgumentError("step plan: negative num_seqs");
  if (kv.size() != num_blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("step plan: ", kv.size(), " KV groups, the model has ",
                                                   num_blocks.size()));
  }
  for (size_t i = 0; i < t; ++i) {
    if (token_seq[i] < 0 || token_seq[i] >= num_seqs) {
      return absl::InvalidArgumentError(absl::StrCat("step plan: token ", i, " has sequence ", token_seq[i]));
    }
    if (positions[i] < 0) return absl::InvalidArgumentError(absl::StrCat("step plan: token ", i, " has a negative position"));
  }
  for (size_t g = 0; g < kv.size(); ++g) {
    const KvGroupPlan& k = kv[g];
    if (k.slot_mapping.size() != t || k.max_blocks_per_seq < 0 ||
        k.block_tables.size() != static_cast<size_t>(num_seqs) * static_cast<size_t>(k.max_blocks_per_seq)) {
      return absl::InvalidArgumentError(absl::StrCat("step plan: KV group ", g, " arrays have the wrong sizes"));
    }
    const int64_t num_slots = num_blocks[g] * block_size;
    for (size_t i = 0; i < t; ++i) {
      if (positions[i] / block_size >= k.max_blocks_per_seq) {
        return absl::InvalidArgumentError(absl::StrCat("step plan: token ", i, " position ", positions[i],
                                                       " is outside its block table"));
      }
      if (k.slot_mapping[i] >= num_slots) {
        return absl::InvalidArgumentError(absl::StrCat("step plan: token ", i, " slot ", k.slot_mapping[i],
                                                       " exceeds KV group ", g, " (", num_slots, " slots)"));
      }
    }
    for (int32_t b : k.block_tables) {
      if (b >= num_blocks[g]) return absl::InvalidArgumentError(absl::StrCat("step plan: block ", b, " out of range"));
    }
  }
  for (int32_t r : logit_rows) {
    if (r < 0 || static_cast<size_t>(r) >= t) {
      return absl::InvalidArgumentError(absl::StrCat("step plan: logit row ", r, " out of range"));
    }
  }
  if (sampling.empty()) {
    if (!penalty_offsets.empty() || !penalty_tokens.empty() || !penalty_counts.empty()) {
      return absl::InvalidArgumentError("step plan: penalty entries without sampling rows");
    }
    return absl::OkStatus();
  }
  if (sampling.size() != logit_rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat("step plan: ", sampling.size(), " sampling rows for ",
                                                   logit_rows.size(), " logit rows"));
  }
  if (penalty_offsets.size() != sampling.size() + 1 || penalty_offsets.front() != 0 ||
      penalty_tokens.size() != penalty_counts.size() ||
      static_cast<size_t>(penalty_offsets.back()) != penalty_tokens.size() ||
      !std::is_sorted(penalty_offsets.begin(), penalty_offsets.end())) {
    return absl::InvalidArgumentError("step plan: malformed penalty entries (offsets must run from 0 to their count)");
  }
  for (int32_t c : penalty_counts) {
    if (c < kMaskedCount) return absl::InvalidArgumentError(absl::StrCat("step plan: penalty count ", c));
  }
  return absl::OkStatus();
}

}  // namespace tpserve

// Grammar's debug printing (grammar.h). Tested by tests/structured_output_test.cc.
#include "coordinator/structured/grammar.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve {

std::string Grammar::DebugString() const {
  std::string out;
  for (uint32_t s = 0; s < num_states(); ++s) {
    const uint32_t rule = rule_of(s);
    absl::StrAppend(&out, s, " [", rule_name(rule), s == rule_start(rule) ? " start" : "", is_final(s) ? " final" : "",
                    "]");
    // Byte edges as ranges of equal target.
    int run_start = -1;
    uint32_t run_target = kNoState;
    for (int b = 0; b <= 256; ++b) {
      const uint32_t t = b < 256 ? Next(s, static_cast<uint8_t>(b)) : kNoState;
      if (b < 256 && t == run_target && run_start >= 0) continue;
      if (run_start >= 0 && run_target != kNoState) {
        absl::StrAppendFormat(&out, " %02x-%02x->%u", run_start, b - 1, run_target);
      }
      run_start = b;
      run_target = t;
    }
    for (const CallEdge& c : calls(s)) absl::StrAppend(&out, " call ", rule_name(c.rule), "->", c.return_state);
    out.push_back('\n');
  }
  return out;
}

}  // namespace tpserve

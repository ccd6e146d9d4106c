// The `pattern` subset compiler (regex_subset.h): a recursive-descent parser to a small
// syntax tree, then Thompson-style fragments on GrammarBuilder. Tested by
// tests/structured_output_test.cc.
#include "coordinator/structured/regex_subset.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/structured/json_lexical.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

using Node = GrammarBuilder::Node;

struct Re {
  enum Kind { kSet, kConcat, kAlt, kRepeat, kBegin, kEnd } kind = kSet;
  CodepointRanges set;   // kSet
  std::vector<Re> kids;  // kConcat, kAlt, kRepeat (one)
  int min = 0, max = 0;  // kRepeat; max -1: unbounded

  static Re Of(Kind kind) {
    Re re;
    re.kind = kind;
    return re;
  }
  static Re Set(CodepointRanges set) {
    Re re = Of(kSet);
    re.set = std::move(set);
    return re;
  }
};

CodepointRanges Digit() { return {{'0', '9'}}; }
CodepointRanges Word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
CodepointRanges Space() {
  return NormalizeRanges({{'\t', '\r'},
                          {' ', ' '},
                          {0xA0, 0xA0},
                          {0x1680, 0x1680},
                          {0x2000, 0x200A},
                          {0x2028, 0x2029},
                          {0x202F, 0x202F},
                          {0x205F, 0x205F},
                          {0x3000, 0x3000},
                          {0xFEFF, 0xFEFF}});
}
CodepointRanges AnyButNewline() { return ComplementRanges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

class Parser {
 public:
  Parser(std::string_view pattern, int max_repetition) : p_(pattern), max_repetition_(max_repetition) {}

  absl::StatusOr<Re> ParseAll() {
    TP_ASSIGN_OR_RETURN(Re re, ParseAlt(/*top=*/true));
    if (pos_ < p_.size()) return Malformed("unbalanced ')'");
    return re;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at offset ", pos_, " is not supported"));
  }
  absl::Status Malformed(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed: ", what, " at offset ", pos_));
  }
  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek() const { return p_[pos_]; }

  // The code point at pos_ (the pattern is valid UTF-8: it came from a JSON string).
  char32_t NextChar() {
    const auto lead = static_cast<unsigned char>(p_[pos_++]);
    if (lead < 0x80) return lead;
    const int extra = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : 1;
    char32_t cp = lead & (0x3F >> extra);
    for (int i = 0; i < extra && pos_ < p_.size(); ++i) {
      cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_++]) & 0x3F);
    }
    return cp;
  }

  absl::StatusOr<Re> ParseAlt(bool top) {
    Re alt = Re::Of(Re::kAlt);
    while (true) {
      TP_ASSIGN_OR_RETURN(Re concat, ParseConcat(top));
      alt.kids.push_back(std::move(concat));
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    return alt;
  }

  absl::StatusOr<Re> ParseConcat(bool top) {
    Re concat = Re::Of(Re::kConcat);
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '^') {
        if (!top || !concat.kids.empty()) return Error("'^' inside the pattern");
        ++pos_;
        concat.kids.push_back(Re::Of(Re::kBegin));
        continue;
      }
      if (Peek() == '$') {
        ++pos_;
        if (!top || (!AtEnd() && Peek() != '|')) {
          --pos_;
          return Error("'$' inside the pattern");
        }
        concat.kids.push_back(Re::Of(Re::kEnd));
        continue;
      }
      TP_ASSIGN_OR_RETURN(Re atom, ParseAtom());
      TP_ASSIGN_OR_RETURN(atom, ParseQuantifiers(std::move(atom)));
      concat.kids.push_back(std::move(atom));
    }
    return concat;
  }

  // Reads a decimal number at pos_; -1 when there is none.
  int ReadNumber() {
    int n = -1;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      n = std::min((n < 0 ? 0 : n) * 10 + (Peek() - '0'), 1'000'000);
      ++pos_;
    }
    return n;
  }

  absl::StatusOr<Re> ParseQuantifiers(Re atom) {
    while (!AtEnd()) {
      const size_t start = pos_;
      int min = 0, max = 0;
      const char c = Peek();
      if (c == '?' || c == '*' || c == '+') {
        ++pos_;
        min = c == '+' ? 1 : 0;
        max = c == '?' ? 1 : -1;
      } else if (c == '{') {
        ++pos_;
        min = ReadNumber();
        max = min;
        if (min >= 0 && !AtEnd() && Peek() == ',') {
          ++pos_;
          max = ReadNumber();
        }
        if (min < 0 || AtEnd() || Peek() != '}') {  // not a quantifier: '{' is a literal
          pos_ = start;
          return atom;
        }
        ++pos_;
        if (max >= 0 && max < min) {
          pos_ = start;
          return Malformed("a {n,m} count with m < n");
        }
        if (min > max_repetition_ || max > max_repetition_) {
          pos_ = start;
          return Error(absl::StrCat("a repetition count above ", max_repetition_));
        }
      } else {
        return atom;
      }
      if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: the same language
      if (atom.kind == Re::kBegin || atom.kind == Re::kEnd) return Error("a quantified anchor");
      Re repeat = Re::Of(Re::kRepeat);
      repeat.min = min;
      repeat.max = max;
      repeat.kids.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  absl::StatusOr<Re> ParseAtom() {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (!AtEnd() && Peek() == '?') {
        if (p_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (p_.substr(pos_, 2) == "?<" && p_.substr(pos_, 3) != "?<=" && p_.substr(pos_, 3) != "?<!") {
          const size_t close = p_.find('>', pos_);
          if (close == std::string_view::npos) return Malformed("an unterminated group name");
          pos_ = close + 1;
        } else {
          return Error("lookaround or a group flag");
        }
      }
      TP_ASSIGN_OR_RETURN(Re inner, ParseAlt(/*top=*/false));
      if (AtEnd() || Peek() != ')') return Malformed("an unclosed '('");
      ++pos_;
      return inner;
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return Re::Set(AnyButNewline());
    }
    if (c == '*' || c == '+' || c == '?') return Malformed("a quantifier with nothing to repeat");
    if (c == '\\') {
      TP_ASSIGN_OR_RETURN(CodepointRanges set, ParseEscape(/*in_class=*/false));
      return Re::Set(std::move(set));
    }
    const char32_t cp = NextChar();
    return Re::Set({{cp, cp}});
  }

  // pos_ at '\'. Returns the set the escape stands for.
  absl::StatusOr<CodepointRanges> ParseEscape(bool in_class) {
    ++pos_;
    if (AtEnd()) return Malformed("a trailing '\\'");
    const char c = Peek();
    const auto one = [&](char32_t cp) -> CodepointRanges {
      ++pos_;
      return {{cp, cp}};
    };
    switch (c) {
      case 'd':
        ++pos_;
        return Digit();
      case 'D':
        ++pos_;
        return ComplementRanges(Digit());
      case 'w':
        ++pos_;
        return Word();
      case 'W':
        ++pos_;
        return ComplementRanges(Word());
      case 's':
        ++pos_;
        return Space();
      case 'S':
        ++pos_;
        return ComplementRanges(Space());
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 't':
        return one('\t');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        return one('\0');
      case 'b':
        if (in_class) return one('\b');
        return Error("'\\b' (word boundary)");
      case 'x':
      case 'u': {
        const size_t digits = c == 'x' ? 2 : 4;
        if (pos_ + 1 + digits > p_.size()) return Malformed("a short \\x or \\u escape");
        uint32_t cp = 0;
        for (size_t i = 0; i < digits; ++i) {
          const char h = p_[pos_ + 1 + i];
          const int v = (h >= '0' && h <= '9')   ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
          if (v < 0) return Malformed("a malformed \\x or \\u escape");
          cp = cp * 16 + v;
        }
        pos_ += 1 + digits;
        if (cp >= 0xD800 && cp <= 0xDBFF && p_.substr(pos_, 2) == "\\u" && pos_ + 6 <= p_.size()) {
          const size_t save = pos_;
          ++pos_;
          TP_ASSIGN_OR_RETURN(const CodepointRanges low, ParseEscape(in_class));
          if (low.size() == 1 && low[0].first >= 0xDC00 && low[0].first <= 0xDFFF) {
            const char32_t full = 0x10000 + ((cp - 0xD800) << 10) + (low[0].first - 0xDC00);
            return CodepointRanges{{full, full}};
          }
          pos_ = save;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) return Error("a lone surrogate escape");
        return CodepointRanges{{cp, cp}};
      }
      default:
        break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
      return Error(absl::StrCat("the escape '\\", std::string(1, c), "'"));
    }
    const char32_t cp = NextChar();  // escaped punctuation or any other character: itself
    return CodepointRanges{{cp, cp}};
  }

  absl::StatusOr<Re> ParseClass() {
    ++pos_;  // '['
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointRanges set;
    bool first = true;
    while (true) {
      if (AtEnd()) return Malformed("an unclosed '['");
      if (Peek() == ']' && !first) break;
      if (Peek() == ']' && first) {  // ECMA: "[]" is an empty class, "[^]" any character
        break;
      }
      first = false;
      TP_ASSIGN_OR_RETURN(CodepointRanges lo, ClassAtom());
      if (!AtEnd() && Peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        TP_ASSIGN_OR_RETURN(CodepointRanges hi, ClassAtom());
        if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second || hi[0].first != hi[0].second) {
          return Error("a class range over a class escape");
        }
        if (hi[0].first < lo[0].first) return Malformed("a class range out of order");
        set.emplace_back(lo[0].first, hi[0].first);
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    ++pos_;  // ']'
    set = NormalizeRanges(std::move(set));
    if (negate) set = ComplementRanges(set);
    return Re::Set(std::move(set));
  }

  absl::StatusOr<CodepointRanges> ClassAtom() {
    if (Peek() == '\\') return ParseEscape(/*in_class=*/true);
    const char32_t cp = NextChar();
    return CodepointRanges{{cp, cp}};
  }

  std::string_view p_;
  int max_repetition_;
  size_t pos_ = 0;
};

class Emitter {
 public:
  explicit Emitter(GrammarBuilder& b) : b_(b) {}

  absl::StatusOr<Node> Emit(const Re& re, Node from) {
    if (b_.TooLarge()) return absl::ResourceExhaustedError("the pattern needs too many automaton states");
    switch (re.kind) {
      case Re::kSet:
        if (re.set.empty())
          return absl::InvalidArgumentError("a character class that matches nothing is not supported");
        return EncodedCharOf(b_, from, re.set);
      case Re::kConcat: {
        Node at = from;
        for (const Re& kid : re.kids) {
          TP_ASSIGN_OR_RETURN(at, Emit(kid, at));
        }
        if (at == from) {
          at = b_.NewNode();
          b_.Epsilon(from, at);
        }
        return at;
      }
      case Re::kAlt: {
        const Node end = b_.NewNode();
        for (const Re& kid : re.kids) {
          TP_ASSIGN_OR_RETURN(const Node kid_end, Emit(kid, from));
          b_.Epsilon(kid_end, end);
        }
        return end;
      }
      case Re::kRepeat: {
        Node at = from;
        for (int i = 0; i < re.min; ++i) {
          TP_ASSIGN_OR_RETURN(at, Emit(re.kids[0], at));
        }
        if (re.max < 0) {
          const Node loop = b_.NewNode();
          b_.Epsilon(at, loop);
          TP_ASSIGN_OR_RETURN(const Node again, Emit(re.kids[0], loop));
          b_.Epsilon(again, loop);
          return loop;
        }
        const Node end = b_.NewNode();
        b_.Epsilon(at, end);
        for (int i = re.min; i < re.max; ++i) {
          TP_ASSIGN_OR_RETURN(at, Emit(re.kids[0], at));
          b_.Epsilon(at, end);
        }
        return end;
      }
      case Re::kBegin:
      case Re::kEnd:
        return from;  // handled by EmitTop
    }
    return from;
  }

  // Any text (in any encoding), for an unanchored side.
  Node AnyText(Node from) {
    const Node loop = b_.NewNode();
    b_.Epsilon(from, loop);
    AnyEncodedCharInto(b_, loop, loop);
    return loop;
  }

 private:
  GrammarBuilder& b_;
};

}  // namespace

absl::StatusOr<GrammarBuilder::Node> BuildPatternContents(GrammarBuilder& builder, GrammarBuilder::Node from,
                                                          std::string_view pattern, int max_repetition) {
  Parser parser(pattern, max_repetition);
  TP_ASSIGN_OR_RETURN(const Re top, parser.ParseAll());
  Emitter emitter(builder);
  const Node end = builder.NewNode();
  for (const Re& alternative : top.kids) {
    const auto& kids = alternative.kids;
    const bool begin = !kids.empty() && kids.front().kind == Re::kBegin;
    const bool end_anchor = !kids.empty() && kids.back().kind == Re::kEnd;
    Node at = begin ? from : emitter.AnyText(from);
    if (!begin) {  // AnyText loops on its node: start the body from a fresh one
      const Node fresh = builder.NewNode();
      builder.Epsilon(at, fresh);
      at = fresh;
    }
    TP_ASSIGN_OR_RETURN(at, emitter.Emit(alternative, at));
    if (!end_anchor) at = emitter.AnyText(at);
    builder.Epsilon(at, end);
  }
  return end;
}

}  // namespace tpserve

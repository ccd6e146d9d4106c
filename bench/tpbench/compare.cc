// tpbench compare's prices, cost, output agreement and summary (see compare.h).
#include "bench/tpbench/compare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/tpbench/svg_chart.h"
#include "coordinator/router/router_config.h"

namespace tpserve::bench {
namespace {

using Json = nlohmann::json;

// Power-of-two bins of a first-difference index: 0 -> 0, 1 -> 1, 2-3 -> 2, 4-7 -> 3, ...
int Bin(int64_t index) {
  int bin = 0;
  for (uint64_t v = static_cast<uint64_t>(index); v > 0; v >>= 1) ++bin;
  return bin;
}

std::string BinLabel(int bin) {
  if (bin <= 1) return absl::StrCat(bin);
  const int64_t lo = int64_t{1} << (bin - 1);
  return absl::StrCat(lo, "-", 2 * lo - 1);
}

// Successful, non-warm-up records by prompt (the first one where a prompt was sent twice).
std::map<int, const RequestRecord*> ByPrompt(const std::vector<RequestRecord>& records) {
  std::map<int, const RequestRecord*> out;
  for (const RequestRecord& r : records) {
    if (r.round >= 0) out.try_emplace(r.prompt_index, &r);
  }
  return out;
}

struct SideView {
  const CompareSide* side;
  LevelSummary level;
  Cost cost;
  std::map<std::string, int64_t> backends;  // records per backend that answered
};

SideView View(const CompareSide& side) {
  SideView v{&side, {}, {}, {}};
  const std::vector<LevelSummary> levels = SummarizeLevels(side.run, side.records, SloSpec{});
  if (!levels.empty()) v.level = levels.front();
  v.cost = CostOf(side.records, side.price_of);
  for (const RequestRecord& r : side.records) {
    if (r.round >= 0) ++v.backends[r.outcome.backend.empty() ? std::string(kNoBackend) : r.outcome.backend];
  }
  return v;
}

Json NumberOrNull(double v) { return v < 0 ? Json() : Json(v); }

Json SideJson(const SideView& v) {
  const CompareSide& s = *v.side;
  const LevelSummary& l = v.level;
  Json backends = Json::object();
  for (const auto& [url, n] : v.backends) backends[url] = n;
  const bool complete = v.cost.complete();
  return Json{{"name", s.name},
              {"target", s.target},
              {"model", s.model},
              {"backends", std::move(backends)},
              {"requests", l.requests},
              {"successes", l.successes},
              {"errors", l.errors},
              {"timeouts", l.timeouts},
              {"error_rate", l.error_rate + l.timeout_rate},
              {"duration_s", l.duration_s},
              {"ttft_ms", ToJson(l.ttft_ms)},
              {"tpot_ms", ToJson(l.tpot_ms)},
              {"e2e_ms", ToJson(l.e2e_ms)},
              {"input_tokens", l.input_tokens},
              {"output_tokens", l.output_tokens},
              {"output_throughput", l.output_throughput},
              {"price_source", s.price_source},
              {"cost",
               {{"priced_requests", v.cost.priced_requests},
                {"unpriced_requests", v.cost.unpriced_requests},
                {"input_tokens", v.cost.input_tokens},
                {"output_tokens", v.cost.output_tokens},
                {"usd", complete ? Json(v.cost.usd) : Json()},
                {"usd_per_mtok", NumberOrNull(v.cost.usd_per_mtok())},
                {"usd_per_output_mtok", NumberOrNull(v.cost.usd_per_output_mtok())}}}};
}

Json AgreementJson(const Agreement& a) {
  Json diffs = Json::array();
  for (const auto& [prompt, index] : a.first_difference) diffs.push_back({{"prompt_index", prompt}, {"index", index}});
  Json histogram = Json::array();
  for (const auto& [bin, n] : a.histogram) histogram.push_back({{"first_difference", bin}, {"prompts", n}});
  return Json{{"unit", a.unit},
              {"prompts", a.prompts},
              {"compared", a.compared},
              {"identical", a.identical},
              {"identical_fraction", NumberOrNull(a.identical_fraction())},
              {"not_compared", a.not_compared},
              {"first_difference", std::move(diffs)},
              {"histogram", std::move(histogram)}};
}

std::string UnitText(const std::string& unit) {
  if (unit == "token") return "token ids (tpserve's gRPC API returns them)";
  if (unit == "character") return "characters (the OpenAI API returns text, not token ids)";
  return "nothing (no prompt succeeded on both sides)";
}

std::string Usd(double v) { return v < 0 ? "-" : absl::StrFormat("%.6f", v); }

std::string SideLabel(const CompareSide& s) { return absl::StrCat(s.name, ": ", s.model.empty() ? "(default)" : s.model); }

// The empirical distribution of a side's successful requests' `value` as (value, % of
// requests at most it) points.
Series Cdf(const CompareSide& s, int color, double (*value)(const RequestRecord&)) {
  std::vector<double> v;
  for (const RequestRecord& r : s.records) {
    if (r.round < 0 || !r.outcome.success) continue;
    const double x = value(r);
    if (x >= 0) v.push_back(x);
  }
  std::sort(v.begin(), v.end());
  Series series{SideLabel(s), color, {}};
  for (size_t i = 0; i < v.size(); ++i) series.points.push_back({v[i], 100.0 * static_cast<double>(i + 1) / v.size()});
  return series;
}

double TtftOf(const RequestRecord& r) { return r.outcome.ttft_ms; }
double TpotOf(const RequestRecord& r) {
  const RequestOutcome& o = r.outcome;
  return o.completion_tokens > 1 ? (o.latency_ms - o.ttft_ms) / (o.completion_tokens - 1) : -1;
}

absl::Status WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path.string(), "; choose another --out"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::map<std::string, Price>> ParsePrices(absl::string_view flag_value) {
  std::map<std::string, Price> out;
  for (absl::string_view entry : absl::StrSplit(flag_value, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("--prices: \"", std::string(entry), "\" ", std::string(why),
                                                     "; write MODEL=INPUT:OUTPUT in USD per million tokens, e.g. "
                                                     "gemma=0.1:0.4"));
    };
    // The last '=': model names may hold ':' (e.g. "llama3:8b").
    const size_t eq = entry.rfind('=');
    if (eq == absl::string_view::npos || eq == 0) return bad("has no MODEL=");
    const std::string model(absl::StripAsciiWhitespace(entry.substr(0, eq)));
    const std::vector<absl::string_view> parts = absl::StrSplit(entry.substr(eq + 1), ':');
    if (parts.size() != 2) return bad("does not give INPUT:OUTPUT");
    Price p;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(parts[0]), &p.input_per_mtok) ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(parts[1]), &p.output_per_mtok)) {
      return bad("has a price that is not a number");
    }
    if (!(p.input_per_mtok >= 0) || !(p.output_per_mtok >= 0) || std::isinf(p.input_per_mtok) ||
        std::isinf(p.output_per_mtok)) {
      return bad("has a price that is not a finite number >= 0");
    }
    if (!out.emplace(model, p).second) return bad(absl::StrCat("prices model \"", model, "\" a second time"));
  }
  return out;
}

absl::StatusOr<PriceBook> PriceBook::FromRouterConfig(absl::string_view json_text) {
  absl::StatusOr<RouterConfig> config = ParseRouterConfig(json_text);
  if (!config.ok()) return config.status();
  PriceBook book;
  for (const auto& [name, model] : config->models) {
    for (const RouterBackend& b : model.backends) {
      if (b.price_input_per_mtok.has_value() && b.price_output_per_mtok.has_value()) {
        book.Add(name, b.url, Price{*b.price_input_per_mtok, *b.price_output_per_mtok});
      }
    }
  }
  return book;
}

void PriceBook::Add(const std::string& model, const std::string& backend_url, Price price) {
  prices_[{model, backend_url}] = price;
}

std::optional<Price> PriceBook::Lookup(const std::string& model, const std::string& backend_url) const {
  if (auto it = prices_.find({model, backend_url}); it != prices_.end()) return it->second;
  std::optional<Price> found;
  for (const auto& [key, price] : prices_) {
    if (key.second != backend_url) continue;
    if (found.has_value() &&
        (found->input_per_mtok != price.input_per_mtok || found->output_per_mtok != price.output_per_mtok)) {
      return std::nullopt;  // the models that list this URL price it differently
    }
    found = price;
  }
  return found;
}

double Cost::usd_per_mtok() const {
  const int64_t tokens = input_tokens + output_tokens;
  return complete() && tokens > 0 ? usd / static_cast<double>(tokens) * 1e6 : -1;
}

double Cost::usd_per_output_mtok() const {
  return complete() && output_tokens > 0 ? usd / static_cast<double>(output_tokens) * 1e6 : -1;
}

Cost CostOf(const std::vector<RequestRecord>& records, const PriceOf& price_of) {
  Cost c;
  for (const RequestRecord& r : records) {
    if (r.round < 0 || !r.outcome.success) continue;
    const std::optional<Price> price = price_of ? price_of(r) : std::nullopt;
    const int64_t prompt = r.outcome.prompt_tokens >= 0 ? r.outcome.prompt_tokens : r.expected_prompt_tokens;
    if (!price.has_value() || prompt < 0) {
      ++c.unpriced_requests;
      continue;
    }
    ++c.priced_requests;
    c.input_tokens += prompt;
    c.output_tokens += r.outcome.completion_tokens;
    c.usd += (static_cast<double>(prompt) * price->input_per_mtok +
              static_cast<double>(r.outcome.completion_tokens) * price->output_per_mtok) /
             1e6;
  }
  return c;
}

int64_t FirstDifferentToken(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  if (ia == a.end() && ib == b.end()) return -1;
  return ia - a.begin();
}

int64_t FirstDifferentCharacter(absl::string_view a, absl::string_view b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  if (ia == a.end() && ib == b.end()) return -1;
  size_t byte = static_cast<size_t>(ia - a.begin());
  // The bytes before `byte` are equal; back up to the start of the character holding it.
  auto continuation = [&](size_t k) {
    const unsigned char c = static_cast<unsigned char>(k < a.size() ? a[k] : b[k]);
    return (c & 0xC0) == 0x80;
  };
  while (byte > 0 && continuation(byte)) --byte;
  int64_t chars = 0;
  for (size_t k = 0; k < byte; ++k) chars += continuation(k) ? 0 : 1;
  return chars;
}

Agreement CompareOutputs(const std::vector<RequestRecord>& a, const std::vector<RequestRecord>& b) {
  const std::map<int, const RequestRecord*> pa = ByPrompt(a), pb = ByPrompt(b);
  std::set<int> prompts;
  for (const auto& [p, r] : pa) prompts.insert(p);
  for (const auto& [p, r] : pb) prompts.insert(p);
  Agreement out;
  out.prompts = static_cast<int64_t>(prompts.size());
  // Pairs where both sides answered; tokens when every such pair kept token ids on both sides.
  std::vector<std::pair<const RequestRecord*, const RequestRecord*>> pairs;
  bool all_tokens = true;
  for (int p : prompts) {
    auto ia = pa.find(p), ib = pb.find(p);
    if (ia == pa.end() || ib == pb.end() || !ia->second->outcome.success || !ib->second->outcome.success) {
      ++out.not_compared;
      continue;
    }
    pairs.push_back({ia->second, ib->second});
    all_tokens &= ia->second->outcome.output_token_ids.has_value() && ib->second->outcome.output_token_ids.has_value();
  }
  std::map<int, int64_t> bins;
  for (const auto& [ra, rb] : pairs) {
    const RequestOutcome &oa = ra->outcome, &ob = rb->outcome;
    int64_t first = -1;
    if (all_tokens) {
      first = FirstDifferentToken(*oa.output_token_ids, *ob.output_token_ids);
    } else if (oa.output_text.has_value() && ob.output_text.has_value()) {
      first = FirstDifferentCharacter(*oa.output_text, *ob.output_text);
    } else {
      ++out.not_compared;  // an answer without its output kept
      continue;
    }
    ++out.compared;
    if (first < 0) {
      ++out.identical;
    } else {
      out.first_difference.push_back({ra->prompt_index, first});
      ++bins[Bin(first)];
    }
  }
  if (out.compared > 0) out.unit = all_tokens ? "token" : "character";
  if (!bins.empty()) {
    for (int bin = 0; bin <= bins.rbegin()->first; ++bin) {
      auto it = bins.find(bin);
      out.histogram.push_back({BinLabel(bin), it == bins.end() ? 0 : it->second});
    }
  }
  return out;
}

nlohmann::json CompareJson(const CompareInput& input) {
  const Agreement agreement = CompareOutputs(input.a.records, input.b.records);
  return Json{{"api", input.api},
              {"workload", input.workload},
              {"concurrency", input.concurrency},
              {"num_prompts", input.num_prompts},
              {"temperature", 0},
              {"sides", Json::array({SideJson(View(input.a)), SideJson(View(input.b))})},
              {"agreement", AgreementJson(agreement)}};
}

absl::StatusOr<std::string> WriteCompare(const CompareInput& input, const std::string& out_dir) {
  const SideView va = View(input.a), vb = View(input.b);
  const Agreement agreement = CompareOutputs(input.a.records, input.b.records);

  std::string md = "# tpbench compare\n\n";
  for (const SideView* v : {&va, &vb}) {
    const CompareSide& s = *v->side;
    std::vector<std::string> backends;
    for (const auto& [url, n] : v->backends) backends.push_back(absl::StrCat(url, " (", n, ")"));
    absl::StrAppend(&md, "- ", MarkdownCell(SideLabel(s)), " at ", MarkdownCell(s.target), "; answered by ",
                    MarkdownCell(absl::StrJoin(backends, ", ")), "; prices from ", s.price_source, "\n");
  }
  absl::StrAppend(&md, "\nThe same ", input.num_prompts, " prompts (", MarkdownCell(input.workload), ", ", input.api,
                  ") to each side in turn, ", input.concurrency,
                  " at a time, greedy (temperature 0) with the same max_tokens; warm-up excluded.\n\n");

  auto row = [&](const std::string& name, const std::function<std::string(const SideView&)>& f) {
    return std::vector<std::string>{name, f(va), f(vb)};
  };
  auto stat = [](const Distribution& d, double Distribution::*field, int decimals) {
    return d.count > 0 ? Fmt(d.*field, decimals) : std::string("-");
  };
  const std::vector<std::vector<std::string>> rows = {
      row("Requests", [](const SideView& v) { return absl::StrCat(v.level.requests); }),
      row("Error % (timeouts included)",
          [](const SideView& v) { return Fmt(100 * (v.level.error_rate + v.level.timeout_rate), 1); }),
      row("TTFT median ms", [&](const SideView& v) { return stat(v.level.ttft_ms, &Distribution::median, 1); }),
      row("TTFT P95 ms", [&](const SideView& v) { return stat(v.level.ttft_ms, &Distribution::p95, 1); }),
      row("TPOT median ms", [&](const SideView& v) { return stat(v.level.tpot_ms, &Distribution::median, 2); }),
      row("Output tok/s", [](const SideView& v) { return Fmt(v.level.output_throughput, 1); }),
      row("Input / output tokens",
          [](const SideView& v) { return absl::StrCat(v.level.input_tokens, " / ", v.level.output_tokens); }),
      row("Cost USD", [](const SideView& v) { return Usd(v.cost.complete() ? v.cost.usd : -1); }),
      row("USD per 1M tokens", [](const SideView& v) { return Usd(v.cost.usd_per_mtok()); }),
      row("USD per 1M output tokens", [](const SideView& v) { return Usd(v.cost.usd_per_output_mtok()); }),
  };
  absl::StrAppend(&md, MarkdownTable({"Metric", SideLabel(input.a), SideLabel(input.b)}, rows, /*numeric=*/true), "\n");
  absl::StrAppend(&md, "Cost: (prompt tokens x input price + completion tokens x output price) / 1e6 over the "
                       "successful requests, with the server's token counts.");
  for (const SideView* v : {&va, &vb}) {
    if (v->cost.unpriced_requests > 0) {
      absl::StrAppend(&md, " ", v->side->name, ": ", v->cost.unpriced_requests,
                      " successful requests had no price (none given for the backend that answered, or no prompt "
                      "token count), so its cost is not shown.");
    }
  }
  md += "\n\n";

  absl::StrAppend(&md, "## Output agreement\n\nCompared by ", UnitText(agreement.unit), ": ");
  if (agreement.compared > 0) {
    absl::StrAppend(&md, agreement.identical, " of ", agreement.compared, " prompts identical (",
                    Fmt(100 * agreement.identical_fraction(), 1), "%)");
  } else {
    md += "no prompt compared";
  }
  if (agreement.not_compared > 0) absl::StrAppend(&md, "; ", agreement.not_compared, " not compared (a side failed)");
  md += ".\n\n";
  if (!agreement.histogram.empty()) {
    std::vector<std::vector<std::string>> hist;
    for (const auto& [bin, n] : agreement.histogram) hist.push_back({bin, absl::StrCat(n)});
    absl::StrAppend(&md, "Where the outputs differ, the first differing ", agreement.unit, " (0-based):\n\n",
                    MarkdownTable({absl::StrCat("First different ", agreement.unit), "Prompts"}, hist, true), "\n");
  }

  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& [file, title, axis, value] :
       {std::tuple{"ttft_cdf.svg", "Time to first token", "TTFT (ms)", &TtftOf},
        std::tuple{"tpot_cdf.svg", "Time per output token", "TPOT (ms)", &TpotOf}}) {
    LineChart chart;
    chart.title = absl::StrCat(title, ": share of requests at most x");
    chart.x_label = axis;
    chart.y_label = "% of requests";
    for (Series s : {Cdf(input.a, 0, value), Cdf(input.b, 1, value)}) {
      if (!s.points.empty()) chart.series.push_back(std::move(s));
    }
    if (!chart.series.empty()) files.push_back({file, RenderLineChart(chart)});
  }
  if (agreement.compared > 0) {
    std::vector<Bar> bars = {{"identical", static_cast<double>(agreement.identical), 2}};
    for (const auto& [bin, n] : agreement.histogram) {
      bars.push_back({absl::StrCat("first differs at ", bin), static_cast<double>(n), 1});
    }
    files.push_back({"agreement.svg", RenderBarChart(absl::StrCat("Greedy outputs, A vs B (by ", agreement.unit, ")"),
                                                     "prompts", bars)});
  }
  if (!files.empty()) {
    md += "## Plots\n\n";
    for (const auto& [name, svg] : files) absl::StrAppend(&md, "![](", name, ")\n\n");
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  const std::filesystem::path dir(out_dir);
  for (const auto& [name, svg] : files) {
    if (absl::Status s = WriteText(dir / name, svg); !s.ok()) return s;
  }
  if (absl::Status s = WriteText(dir / "compare.json", CompareJson(input).dump(2) + "\n"); !s.ok()) return s;
  if (absl::Status s = WriteText(dir / "compare.md", md); !s.ok()) return s;
  return md;
}

}  // namespace tpserve::bench

// oneDNN's bf16 matmul for cpu::Linear's kOneDnnBf16 path: x rounded to bf16 by a oneDNN
// reorder, then one matmul over the weights as they are held ([n, k] rows, oneDNN's "ba"
// [k, n]); oneDNN packs weight blocks for its AMX / AVX512-BF16 kernels itself, as it does
// for PyTorch's bf16 linear. Tested by tests/cpu_kernels_test.cc (where the CPU has bf16
// units: oneDNN 2.x has no bf16 kernel below AVX-512).
#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_onednn.h"

namespace tpserve::cpu::onednn {
namespace {

using dnnl::memory;
using Dt = memory::data_type;
using Tag = memory::format_tag;

// Primitives per thread at most before the cache starts over (every distinct row count
// of a prefill chunk is a primitive of its own).
constexpr size_t kMaxCachedShapes = 512;

// The CPU engine, made once. Before oneDNN's first use: oneDNN 2.6 dispatches to AMX only
// when asked (its "initial support" ISA; 2.7+ does by default). This overrides any
// DNNL_MAX_CPU_ISA in the environment.
const dnnl::engine& Engine() {
  static const dnnl::engine* engine = [] {
    if (DetectCpuFeatures().amx_bf16) (void)dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_amx);
    return new dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return *engine;
}

struct Shape {
  int64_t m, k, n;
  int64_t ldy = 0;  // 0: n
  bool operator==(const Shape&) const = default;
};
struct ShapeHash {
  size_t operator()(const Shape& s) const {
    return std::hash<int64_t>()(s.m * 1000003 + s.k * 7919 + s.n + s.ldy * 104729);
  }
};

struct Product {
  memory::desc x_f32, x_bf16, w, y;
  dnnl::reorder round_x;
  dnnl::matmul matmul;
  std::string impl;
};

// Throws dnnl::error where oneDNN has no implementation.
Product MakeProduct(const Shape& s) {
  Product p;
  p.x_f32 = memory::desc({s.m, s.k}, Dt::f32, Tag::ab);
  p.x_bf16 = memory::desc({s.m, s.k}, Dt::bf16, Tag::ab);
  p.w = memory::desc({s.k, s.n}, Dt::bf16, Tag::ba);  // element (kk, r) at r * k + kk
  p.y = s.ldy == 0 ? memory::desc({s.m, s.n}, Dt::f32, Tag::ab)
                   : memory::desc({s.m, s.n}, Dt::f32, memory::dims{s.ldy, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.x_bf16, p.w, p.y), Engine());
  p.impl = pd.impl_info_str();
  p.matmul = dnnl::matmul(pd);
  p.round_x = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), p.x_f32, Engine(), p.x_bf16));
  return p;
}

const Product& CachedProduct(const Shape& s) {
  thread_local std::unordered_map<Shape, Product, ShapeHash> cache;
  auto it = cache.find(s);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxCachedShapes) cache.clear();
  return cache.emplace(s, MakeProduct(s)).first->second;
}

std::string IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return absl::StrCat("isa ", static_cast<int>(isa));
  }
}

}  // namespace

bool Linked() { return true; }

std::string Bf16Implementation(int64_t m, int64_t k, int64_t n) {
  try {
    return CachedProduct({m, k, n}).impl;
  } catch (const dnnl::error&) {
    return "";
  }
}

std::string Describe() {
  Engine();
  const dnnl_version_t* v = dnnl::version();
  return absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch, " (",
                      IsaName(dnnl::get_effective_cpu_isa()), ")");
}

void LinearBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy) {
  const Product& p = CachedProduct({m, k, n, ldy == n ? 0 : ldy});
  thread_local std::vector<uint16_t> x_bf16;
  if (x_bf16.size() < static_cast<size_t>(m * k)) x_bf16.resize(m * k);
  dnnl::stream stream(Engine());
  memory x_f32_mem(p.x_f32, Engine(), const_cast<float*>(x));
  memory x_bf16_mem(p.x_bf16, Engine(), x_bf16.data());
  memory w_mem(p.w, Engine(), const_cast<uint16_t*>(w));
  memory y_mem(p.y, Engine(), y);
  p.round_x.execute(stream, x_f32_mem, x_bf16_mem);
  p.matmul.execute(stream, {{DNNL_ARG_SRC, x_bf16_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, y_mem}});
  stream.wait();
}

void LinearBf16RoundedX(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                        int64_t ldy) {
  const Product& p = CachedProduct({m, k, n, ldy == n ? 0 : ldy});
  dnnl::stream stream(Engine());
  memory x_bf16_mem(p.x_bf16, Engine(), const_cast<uint16_t*>(xb));
  memory w_mem(p.w, Engine(), const_cast<uint16_t*>(w));
  memory y_mem(p.y, Engine(), y);
  p.matmul.execute(stream, {{DNNL_ARG_SRC, x_bf16_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, y_mem}});
  stream.wait();
}

}  // namespace tpserve::cpu::onednn

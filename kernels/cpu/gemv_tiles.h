// How Linear's streaming GEMV kernels (decode batches of at most kMaxStreamingRows rows of
// x) split y = x · w^T into tiles and share them among threads. The AVX2 kernel
// (linear.cc) and the AVX512-BF16 one (gemv_avx512_bf16.cc) compute the tiles; the split
// is theirs in common, and it never depends on how many rows x has: a row's sum is the
// same whether it is computed alone (decode) or among others (speculative verification),
// bit for bit.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace tpserve::cpu::gemv {

// K is cut into blocks of at most this many elements, so that x's block (all rows: 32 KiB a
// row in fp32, 192 KiB for a 6-row verification batch) stays in the L2 (512 KiB per core on
// Zen 3, 1 MiB on Zen 4) while the weight rows stream past it. The cut depends on K alone.
inline constexpr int64_t kMaxKBlock = 8192;
// Below this many multiply-adds an OpenMP fork costs more than it saves.
inline constexpr int64_t kMinParallelMacs = int64_t{1} << 16;

// One tile: x rows [i0, i0 + x_rows) against weight rows [r0, r0 + w_rows) over
// k in [k_begin, k_end). w_rows is the kernel's kR except in a ragged last block.
struct Tile {
  int64_t i0 = 0;
  int x_rows = 0;
  int64_t r0 = 0;
  int64_t w_rows = 0;
  int64_t k_begin = 0;
  int64_t k_end = 0;
  bool accumulate = false;  // a later K block: y += the partial sums rather than y =
  // The weight block this tile's thread streams next, to prefetch into L2 meanwhile
  // (-1: none). The tiles of one weight block (one per chunk of x rows) take turns, a line
  // of each row every `prefetch_period` steps starting at step `prefetch_phase`, so DRAM
  // streams the next block at an even rate while the current one is computed from cache.
  int64_t next_r0 = -1;
  int prefetch_phase = 0;
  int prefetch_period = 1;
};

// Calls tile(const Tile&) for every tile of an [m, k] x [n, k] product, from an OpenMP
// team (parallel above kMinParallelMacs). Parallel over blocks of kR weight rows; each
// block is read from DRAM once and reused from L1/L2 for every chunk of (at most kM) rows
// of x, the chunks as even as possible (7 = 4 + 3, 10 = 4 + 3 + 3). Dynamic scheduling in
// ~8 chunks per thread: a thread that loses its core for a while (another process, a
// spinning BLAS thread) then delays the call by one chunk, not by its whole static share.
// K blocks are equal and a multiple of 64 elements except the last; the loop's closing
// barrier orders their read-modify-writes of y.
template <int kM, int kR, typename TileFn>
void ForEachTile(int64_t m, int64_t k, int64_t n, TileFn&& tile) {
  const int64_t chunks = (m + kM - 1) / kM;
  const int64_t chunk_rows = m / chunks;
  const int64_t longer_chunks = m % chunks;
  const int64_t k_blocks = (k + kMaxKBlock - 1) / kMaxKBlock;
  const int64_t k_block = k_blocks == 1 ? k : ((k + k_blocks - 1) / k_blocks + 63) / 64 * 64;
  const int64_t blocks = (n + kR - 1) / kR;
  const int64_t sched_chunk = std::max<int64_t>(1, blocks / (8 * omp_get_max_threads()));
#pragma omp parallel if (m * n * k >= kMinParallelMacs)
  for (int64_t k_begin = 0; k_begin < k; k_begin += k_block) {
#pragma omp for schedule(dynamic, sched_chunk)
    for (int64_t b = 0; b < blocks; ++b) {
      Tile t;
      t.r0 = b * kR;
      t.w_rows = std::min<int64_t>(kR, n - t.r0);
      t.k_begin = k_begin;
      t.k_end = std::min(k, k_begin + k_block);
      t.accumulate = k_begin > 0;
      // Usually this thread's next block (dynamic chunks are runs of blocks); a ragged last
      // block is not prefetched.
      const bool prefetch = t.r0 + 2 * kR <= n;
      for (int64_t c = 0; c < chunks; ++c) {
        t.i0 = c * chunk_rows + std::min(c, longer_chunks);
        t.x_rows = static_cast<int>(chunk_rows + (c < longer_chunks ? 1 : 0));
        t.next_r0 = prefetch ? t.r0 + kR : -1;
        t.prefetch_phase = static_cast<int>(c);
        t.prefetch_period = static_cast<int>(chunks);
        tile(t);
      }
    }
  }
}

}  // namespace tpserve::cpu::gemv

// STREAM-style memory bandwidth probe, the yardstick the kernel benchmarks print beside
// their own bandwidth. Exercised by bench/kernels_bench.cc.
#pragma once

namespace tpserve::bench {

// Best-of-several triad a[i] = b[i] + s * c[i] over three 256 MiB double arrays (far
// beyond the L3), run by `threads` OpenMP threads. Returns GB/s (1e9 bytes/s) counted as
// STREAM does: 24 bytes per element (two 8-byte reads, one 8-byte write); the extra read
// of a[] that write-allocate caches perform is not counted.
double MeasureTriadBandwidthGBs(int threads);

}  // namespace tpserve::bench

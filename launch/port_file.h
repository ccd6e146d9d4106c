// Where `tpserve serve` listens, for whoever started it: with --http-port 0 / --grpc-port 0
// the kernel picks free ports, and a test or script reads them from stderr or from
// --port-file. Tested by tests/port_file_test.cc and the shell tests (tests/harness.sh).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace tpserve {

// The ports the front ends got; -1 where a server is off.
struct ListeningPorts {
  int http = -1;
  int grpc = -1;
  int metrics = -1;  // `tpserve router --metrics-port`: GET /metrics and /health only
};

// {"http": P, "grpc": Q}; a server that is off is null; with a metrics port,
// {"http": P, "grpc": Q, "metrics": M} (no key without one).
std::string PortFileJson(const ListeningPorts& ports);

// "tpserve: HTTP listening on HOST:P\ntpserve: gRPC listening on HOST:Q\n", a line per
// server that is on ("tpserve: metrics listening on HOST:M" for a metrics port).
std::string ListeningLines(const std::string& host, const ListeningPorts& ports);

// Writes PortFileJson(ports) to path + ".tmp", then renames it to `path`, so a reader that
// sees `path` sees all of it. The error names the file.
absl::Status WritePortFile(const std::string& path, const ListeningPorts& ports);

}  // namespace tpserve

// --port-file and the "listening on" lines of `tpserve serve`. Tested by tests/port_file_test.cc.
#include "launch/port_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

std::string PortOrNull(int port) { return port >= 0 ? absl::StrCat(port) : "null"; }

absl::Status FileError(const std::string& what, const std::string& path, int err) {
  return absl::UnavailableError(absl::StrCat("--port-file: cannot ", what, " ", path, ": ", std::strerror(err)));
}

}  // namespace

std::string PortFileJson(const ListeningPorts& ports) {
  return absl::StrCat("{\"http\": ", PortOrNull(ports.http), ", \"grpc\": ", PortOrNull(ports.grpc),
                      ports.metrics >= 0 ? absl::StrCat(", \"metrics\": ", ports.metrics) : "", "}\n");
}

std::string ListeningLines(const std::string& host, const ListeningPorts& ports) {
  std::string out;
  if (ports.http >= 0) absl::StrAppend(&out, "tpserve: HTTP listening on ", host, ":", ports.http, "\n");
  if (ports.grpc >= 0) absl::StrAppend(&out, "tpserve: gRPC listening on ", host, ":", ports.grpc, "\n");
  if (ports.metrics >= 0) absl::StrAppend(&out, "tpserve: metrics listening on ", host, ":", ports.metrics, "\n");
  return out;
}

absl::Status WritePortFile(const std::string& path, const ListeningPorts& ports) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return FileError("create", tmp, errno);
  const std::string json = PortFileJson(ports);
  const bool written = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    const int err = written ? errno : write_errno;
    std::remove(tmp.c_str());
    return FileError("write", tmp, err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return FileError(absl::StrCat("rename ", tmp, " to"), path, err);
  }
  return absl::OkStatus();
}

}  // namespace tpserve

// launch/port_file.h: what `tpserve serve --port-file` writes and logs. The shell tests
// (tests/harness.sh wait_ports) read the file a real server writes.
#include "launch/port_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class PortFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("port_file_test." + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(PortFileJsonTest, BothPortsOrNull) {
  EXPECT_EQ(PortFileJson({.http = 41234, .grpc = 41235}), "{\"http\": 41234, \"grpc\": 41235}\n");
  EXPECT_EQ(PortFileJson({.http = 8000, .grpc = -1}), "{\"http\": 8000, \"grpc\": null}\n");
  EXPECT_EQ(PortFileJson({}), "{\"http\": null, \"grpc\": null}\n");
  // The router's metrics port, where it has one.
  EXPECT_EQ(PortFileJson({.http = -1, .grpc = 50051, .metrics = 9100}),
            "{\"http\": null, \"grpc\": 50051, \"metrics\": 9100}\n");
}

TEST(ListeningLinesTest, ALinePerServerThatIsOn) {
  EXPECT_EQ(ListeningLines("127.0.0.1", {.http = 41234, .grpc = 41235}),
            "tpserve: HTTP listening on 127.0.0.1:41234\ntpserve: gRPC listening on 127.0.0.1:41235\n");
  EXPECT_EQ(ListeningLines("0.0.0.0", {.http = -1, .grpc = 50051}), "tpserve: gRPC listening on 0.0.0.0:50051\n");
  EXPECT_EQ(ListeningLines("0.0.0.0", {}), "");
  EXPECT_EQ(ListeningLines("h", {.http = -1, .grpc = 2, .metrics = 3}),
            "tpserve: gRPC listening on h:2\ntpserve: metrics listening on h:3\n");
}

TEST_F(PortFileTest, WritesTheFileAndLeavesNoTemporary) {
  const fs::path path = dir_ / "ports.json";
  ASSERT_TRUE(WritePortFile(path.string(), {.http = 1234, .grpc = 5678}).ok());
  EXPECT_EQ(ReadAll(path), "{\"http\": 1234, \"grpc\": 5678}\n");
  EXPECT_FALSE(fs::exists(dir_ / "ports.json.tmp"));
}

TEST_F(PortFileTest, ReplacesAnOldFileWhole) {
  const fs::path path = dir_ / "ports.json";
  {
    std::ofstream old(path);
    old << "a much longer file from an earlier server, not JSON at all\n";
  }
  ASSERT_TRUE(WritePortFile(path.string(), {.http = 1, .grpc = 2}).ok());
  EXPECT_EQ(ReadAll(path), "{\"http\": 1, \"grpc\": 2}\n");
}

TEST_F(PortFileTest, AnUnwritablePathIsAnErrorNamingIt) {
  const fs::path path = dir_ / "no such directory" / "ports.json";
  const absl::Status st = WritePortFile(path.string(), {.http = 1, .grpc = 2});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("--port-file: cannot create " + path.string() + ".tmp"));
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace tpserve

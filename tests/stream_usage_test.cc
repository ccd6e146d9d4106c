// StreamUsage (coordinator/router/stream_usage.h): the usage chunk of an OpenAI SSE stream is
// found however the stream is split into pieces; "usage": null chunks, other lines and a line
// too long to be a usage chunk are passed over; a later usage (vLLM's continuous usage) wins.
#include "coordinator/router/stream_usage.h"

#include <gtest/gtest.h>

#include <string>

namespace tpserve {
namespace {

// tpserve serve's (and OpenAI's) stream with stream_options.include_usage: the chunks, then one
// with empty choices and the usage, then [DONE].
constexpr char kStream[] =
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n"
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"id\":\"c1\",\"choices\":[],\"usage\": {\"prompt_tokens\":17,\"completion_tokens\":5,"
    "\"total_tokens\":22}}\n\n"
    "data: [DONE]\n\n";

TEST(StreamUsageTest, FindsTheUsageChunkWhateverTheSplit) {
  const std::string stream = kStream;
  for (size_t step : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, stream.size()}) {
    SCOPED_TRACE(step);
    StreamUsage usage;
    for (size_t at = 0; at < stream.size(); at += step) usage.Feed(std::string(stream.substr(at, step)));
    ASSERT_TRUE(usage.prompt_tokens().has_value());
    EXPECT_EQ(*usage.prompt_tokens(), 17);
    EXPECT_EQ(*usage.completion_tokens(), 5);
  }
}

TEST(StreamUsageTest, NoUsageChunkIsNoUsage) {
  StreamUsage usage;
  usage.Feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"usage\"}}],\"usage\":null}\n\n");
  usage.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\n");  // half a usage
  usage.Feed(": a comment with \"usage\": {\"prompt_tokens\": 1, \"completion_tokens\": 1}\n\n");
  usage.Feed("data: [DONE]\n\n");
  EXPECT_FALSE(usage.prompt_tokens().has_value());
  EXPECT_FALSE(usage.completion_tokens().has_value());
}

TEST(StreamUsageTest, TheLatestUsageWinsAndCarriageReturnsAreFine) {
  StreamUsage usage;
  usage.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}\r\n\r\n");
  usage.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\r\n\r\n");
  EXPECT_EQ(*usage.prompt_tokens(), 9);
  EXPECT_EQ(*usage.completion_tokens(), 2);
}

TEST(StreamUsageTest, ALineTooLongForAUsageChunkIsSkippedToItsEnd) {
  StreamUsage usage;
  usage.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":6}}\n\n");
  // A 2 MiB line, in pieces: not kept whole (the bound on what a stream costs the router), so
  // its usage-looking start does not count; the line after it does.
  usage.Feed("data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1},\"text\":\"");
  const std::string filler(64 * 1024, 'x');
  for (int i = 0; i < 32; ++i) usage.Feed(filler);
  usage.Feed("\"}\n\n");
  EXPECT_EQ(*usage.prompt_tokens(), 4);
  EXPECT_EQ(*usage.completion_tokens(), 6);
  usage.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":9}}\n\n");
  EXPECT_EQ(*usage.prompt_tokens(), 8);
  EXPECT_EQ(*usage.completion_tokens(), 9);
}

}  // namespace
}  // namespace tpserve

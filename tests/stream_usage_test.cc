// StreamUsage (coordinator/router/stream_usage.h): the usage chunk of an OpenAI SSE stream is
// found however the stream is split into pieces; "usage": null chunks, other lines and a line
// too long to be a usage chunk are passed over; a later usage (vLLM's continuous usage) wins.
// Strip (the router asked for the usage, the client did not): the client gets the stream without
// it, whatever the split: no usage chunk, no "usage" key, every other byte as the backend sent it.
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

// kStream as the client that did not ask for usage gets it: the first chunk without its
// "usage": null (written back compact, key order kept), the usage chunk and its blank line gone.
constexpr char kStripped[] =
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
    "data: [DONE]\n\n";

TEST(StreamUsageTest, StripTakesTheUsageOutOfTheClientsStreamWhateverTheSplit) {
  const std::string stream = kStream;
  for (size_t step : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, stream.size()}) {
    SCOPED_TRACE(step);
    StreamUsage usage;
    std::string client;
    for (size_t at = 0; at < stream.size(); at += step) client += usage.Strip(stream.substr(at, step));
    client += usage.Rest();
    EXPECT_EQ(client, kStripped);
    ASSERT_TRUE(usage.prompt_tokens().has_value());
    EXPECT_EQ(*usage.prompt_tokens(), 17);
    EXPECT_EQ(*usage.completion_tokens(), 5);
  }
}

TEST(StreamUsageTest, StripKeepsEveryOtherLineAsSentAndEachLineWhole) {
  StreamUsage usage;
  // Spacing, a comment, an event name, a "usage" inside the text (escaped quotes: not a key),
  // CRLF endings: passed byte for byte, each once its newline came.
  EXPECT_EQ(usage.Strip("data: {\"choices\": [{\"text\": \"the \\\"usage\\\" word\"}]}\r\n"),
            "data: {\"choices\": [{\"text\": \"the \\\"usage\\\" word\"}]}\r\n");
  EXPECT_EQ(usage.Strip("\r\n: keep-alive\n"), "\r\n: keep-alive\n");
  EXPECT_EQ(usage.Strip("event: x\ndata: {\"choi"), "event: x\n");
  EXPECT_EQ(usage.Strip("ces\":[{\"text\":\"a\"}]}\n\n"), "data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
  // vLLM's continuous usage: every chunk's running total is read, and taken out; CRLF kept.
  EXPECT_EQ(usage.Strip("data: {\"choices\":[{\"text\":\"b\"}],\"usage\":{\"prompt_tokens\":3,"
                        "\"completion_tokens\":2}}\r\n\r\n"),
            "data: {\"choices\":[{\"text\":\"b\"}]}\r\n\r\n");
  EXPECT_EQ(*usage.completion_tokens(), 2);
  EXPECT_EQ(usage.Strip("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\n\r\n"
                        "data: [DONE]\r\n\r\n"),
            "data: [DONE]\r\n\r\n");
  EXPECT_EQ(*usage.completion_tokens(), 4);
  // An unterminated last line is the stream's end.
  EXPECT_EQ(usage.Strip("data: [DO"), "");
  EXPECT_EQ(usage.Rest(), "data: [DO");
}

TEST(StreamUsageTest, StripPassesALineTooLongForAUsageChunkAsItComes) {
  StreamUsage usage;
  const std::string start = "data: {\"usage\":null,\"text\":\"";
  const std::string filler(64 * 1024, 'x');
  std::string client = usage.Strip(start);
  EXPECT_EQ(client, "");
  for (int i = 0; i < 32; ++i) client += usage.Strip(filler);
  EXPECT_GT(client.size(), size_t{1} << 20);  // not held whole
  client += usage.Strip("\"}\n\n");
  std::string whole = start;
  for (int i = 0; i < 32; ++i) whole += filler;
  EXPECT_EQ(client, whole + "\"}\n\n");
  EXPECT_FALSE(usage.prompt_tokens().has_value());
}

}  // namespace
}  // namespace tpserve

namespace tpserve {
namespace {

// A stream the router ends early: the choices it did not finish end with finish_reason "error",
// in a chunk like the backend's own (id, object, created, model), whether the stream was fed or
// stripped; nothing before any chunk came or once every choice finished.
TEST(StreamUsageTest, ErrorChunkEndsTheUnfinishedChoices) {
  const std::string chat =
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\","
      "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\","
      "\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\": \"stop\"}]}\n\n";
  for (bool strip : {false, true}) {
    StreamUsage u;
    EXPECT_EQ(u.ErrorChunk(2), "");
    for (char c : chat) {
      if (strip) {
        u.Strip(std::string(1, c));
      } else {
        u.Feed(std::string(1, c));
      }
    }
    EXPECT_EQ(u.ErrorChunk(2),
              "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\","
              "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"error\"}]}\n\n")
        << strip;
    EXPECT_EQ(u.ErrorChunk(1), u.ErrorChunk(2));
    u.Feed("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n");
    EXPECT_EQ(u.ErrorChunk(2), "");
  }
  StreamUsage completions;
  completions.Feed("data: {\"id\":\"t\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
                   "\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":null}]}\n\n");
  EXPECT_EQ(completions.ErrorChunk(1),
            "data: {\"id\":\"t\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
            "\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"error\"}]}\n\n");
}

}  // namespace
}  // namespace tpserve

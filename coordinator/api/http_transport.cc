// HttpTransport: reading requests under deadlines, writing responses, noticing disconnects;
// the listening socket is http_acceptor.h's. Tested by tests/http_transport_test.cc.
#include "coordinator/api/http_transport.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/http_acceptor.h"

namespace tpserve {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;
using Strand = asio::strand<asio::io_context::executor_type>;

struct HttpTransport::Shared {
  // One I/O thread: Asio may then queue what that thread posts itself without locking.
  Shared(HttpTransportOptions o, HttpHandler h, HttpErrorBody e)
      : ioc(o.io_threads <= 1 ? 1 : BOOST_ASIO_CONCURRENCY_HINT_DEFAULT),
        options(std::move(o)),
        handler(std::move(h)),
        error_body(std::move(e)) {}
  asio::io_context ioc;
  const HttpTransportOptions options;
  const HttpHandler handler;
  const HttpErrorBody error_body;
  std::atomic<int64_t> open{0};
  std::mutex mu;
  bool stopping = false;  // guarded by mu
  std::unordered_map<HttpConnection*, std::weak_ptr<HttpConnection>> live;  // guarded by mu
  // Set once Shutdown() has joined the I/O threads: from then on nothing runs the io_context.
  std::shared_mutex post_mu;
  bool io_joined = false;  // guarded by post_mu
};

namespace {

std::chrono::steady_clock::duration ToSteady(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(absl::ToChronoNanoseconds(d));
}

std::string StatusLine(int status) {
  const boost::beast::string_view reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return absl::StrCat("HTTP/1.1 ", status, " ", absl::string_view(reason.data(), reason.size()), "\r\n");
}

}  // namespace

// One TCP connection: its requests, one at a time, and their responses. Every member runs on
// the connection's strand (the socket's executor).
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(std::shared_ptr<HttpTransport::Shared> shared, tcp::socket socket, Strand strand)
      : shared_(std::move(shared)), strand_(std::move(strand)), socket_(std::move(socket)), timer_(strand_) {
    shared_->open.fetch_add(1);
  }
  ~HttpConnection() {
    shared_->open.fetch_sub(1);
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->live.erase(this);
  }

  const Strand& executor() const { return strand_; }

  // Runs `fn` on the strand, from any thread: queued, or with `inline_ok` at once when called
  // on the strand (a pump writing its events: nothing queued for the exchange can be older).
  // Queued calls go to the connection's inbox, in call order; the first one into an empty inbox
  // posts one RunInbox to the strand, which runs every call queued by then, corked: what they
  // write goes out in one send when the last returns. So a burst of a stream's events from
  // another thread costs one trip through the I/O loop (and at most one wakeup of its thread),
  // not one each. Once Shutdown() has joined the I/O threads, a handler queued on the
  // io_context would never run nor be destroyed, and would keep its connection (and through it
  // the io_context) alive forever: `fn` is destroyed unrun instead.
  template <typename Fn>
  void Post(Fn fn, bool inline_ok = false) {
    if (inline_ok && strand_.running_in_this_thread()) return fn();
    {
      std::shared_lock<std::shared_mutex> lock(shared_->post_mu);
      if (!shared_->io_joined) {
        bool post;
        {
          std::lock_guard<std::mutex> inbox_lock(inbox_mu_);
          inbox_.emplace_back(std::move(fn));
          post = !inbox_posted_;
          inbox_posted_ = true;
        }
        // Posted under post_mu: Shutdown() runs what was posted before it set io_joined.
        if (post) asio::post(executor(), [self = shared_from_this()] { self->RunInbox(); });
        return;
      }
    }
    Fn dropped = std::move(fn);  // destroyed outside the lock: it may hold the last reference to an exchange
  }

  // `over_limit`: the acceptor found max_connections open already; answered 503 and closed.
  void Start(bool over_limit) {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->stopping) return Close();
      shared_->live.emplace(this, weak_from_this());
    }
    if (over_limit) {
      keep_alive_ = false;
      return SendError(503, absl::UnavailableError(absl::StrCat("the server has reached its limit of ",
                                                                shared_->options.max_connections,
                                                                " connections (--max-connections); retry later")));
    }
    arrival_ = absl::Now();
    StartHeader();
  }

  void Close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    ErrorCode ignored;
    socket_.close(ignored);
    ClearDeadline();
    if (std::function<void()> gone = std::move(client_gone_); gone && !response_done_) gone();
    client_gone_ = nullptr;
  }

  // The current exchange's calls (on the strand). `seq` names the exchange; stale ones are ignored.
  void Respond(uint64_t seq, int status, absl::string_view content_type, std::string body,
               const std::vector<HttpHeader>& headers) {
    if (!Current(seq) || response_started_) return;
    response_started_ = true;
    std::string head = Head(status, content_type, headers);
    absl::StrAppend(&head, "Content-Length: ", body.size(), "\r\n\r\n");
    Queue(std::move(head));
    Queue(std::move(body));
    FinishResponse();  // head and body in one send
  }
  void StartStream(uint64_t seq, int status, absl::string_view content_type, const std::vector<HttpHeader>& headers) {
    if (!Current(seq) || response_started_) return;
    response_started_ = true;
    streaming_ = true;
    chunked_ = http_minor_ >= 1;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends when the connection does
    std::string head = Head(status, content_type, headers);
    absl::StrAppend(&head, chunked_ ? "Transfer-Encoding: chunked\r\n\r\n" : "\r\n");
    Queue(std::move(head));
    Flush();
  }
  void Write(uint64_t seq, std::string data) {
    if (!Current(seq) || !streaming_ || response_done_ || data.empty()) return;
    if (chunked_) Queue(absl::StrCat(absl::Hex(data.size()), "\r\n"));
    Queue(std::move(data));
    if (chunked_) Queue("\r\n");
    Flush();  // the chunk's size line, data and CRLF in one send
  }
  void End(uint64_t seq, std::string last) {
    if (!Current(seq) || !streaming_ || response_done_) return;
    if (chunked_) {  // the last piece and the terminating chunk in one write
      last = last.empty() ? std::string("0\r\n\r\n") : absl::StrCat(absl::Hex(last.size()), "\r\n", last, "\r\n0\r\n\r\n");
    }
    Queue(std::move(last));
    FinishResponse();
  }
  void SetClientGone(uint64_t seq, std::function<void()> fn) {
    if (seq != seq_ || response_done_) return;  // answered: the client was not left waiting
    if (phase_ == Phase::kClosed) return fn();
    client_gone_ = std::move(fn);
  }
  // The exchange's last reference went away.
  void Dropped(uint64_t seq) {
    if (Current(seq) && !response_done_) Close();  // unanswered: the client must not wait forever
  }

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kLinger, kClosed };

  bool Current(uint64_t seq) const { return phase_ == Phase::kHandling && seq == seq_; }

  void SetDeadline(absl::Duration d) {
    const uint64_t gen = ++deadline_gen_;
    timed_out_ = absl::OkStatus();
    timer_.expires_after(ToSteady(d));
    timer_.async_wait([self = shared_from_this(), gen](ErrorCode ec) {
      if (!ec && gen == self->deadline_gen_) self->OnDeadline();
    });
  }
  void ClearDeadline() {
    ++deadline_gen_;
    timed_out_ = absl::OkStatus();
    timer_.cancel();
  }

  // A request that has begun (some of its bytes arrived) and missed its header or body
  // deadline is answered 408 before the close: the read in progress is cancelled, and
  // OnHeader / OnBody answer once it has stopped (it holds the parser and the buffer). A
  // connection with no request under way (idle between requests, or new and silent) is closed
  // without a word: there is nothing to answer, and a 408 there could be read as the answer
  // to a request the client sends at that moment.
  void OnDeadline() {
    const HttpTransportOptions& o = shared_->options;
    if (phase_ == Phase::kBody) {
      timed_out_ = absl::InvalidArgumentError(
          absl::StrCat("the request body did not arrive within ", absl::FormatDuration(o.body_timeout),
                       " of its headers (--http-body-timeout); send the whole body without pausing"));
    } else if (phase_ == Phase::kHeader && (buffer_.size() > 0 || (parser_ && parser_->got_some()))) {
      timed_out_ = absl::InvalidArgumentError(
          absl::StrCat("the request headers did not arrive within ", absl::FormatDuration(o.header_timeout),
                       " (--http-header-timeout); send them without pausing"));
    } else {
      return Close();
    }
    ErrorCode ignored;
    socket_.cancel(ignored);
  }

  // Waits until the socket is readable: the next request's first byte (idle), or, while a
  // response is pending, end of stream (the client went away) or a pipelined request. A
  // one-byte peek rather than async_wait(wait_read): Asio tries the peek at once, then waits
  // on the socket's existing epoll registration (async_wait makes an epoll_ctl call each time).
  void WatchReadable() {
    if (watching_ || phase_ == Phase::kClosed) return;
    watching_ = true;
    socket_.async_receive(asio::buffer(&peeked_, 1), tcp::socket::message_peek,
                          [self = shared_from_this()](ErrorCode ec, size_t n) {
                            self->watching_ = false;
                            self->OnReadable(ec, n);
                          });
  }
  void OnReadable(ErrorCode ec, size_t n) {
    if (phase_ == Phase::kClosed || phase_ == Phase::kLinger) return;
    if (ec || n == 0) return Close();  // the client closed its side (eof) or reset it
    if (phase_ == Phase::kIdle) {
      arrival_ = absl::Now();
      StartHeader();
    } else {
      pipelined_ = true;  // read after this response; disconnects go unnoticed until then
    }
  }

  void StartHeader() {
    phase_ = Phase::kHeader;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(shared_->options.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(shared_->options.max_body_bytes);
    if (ReadNow()) return;
    SetDeadline(shared_->options.header_timeout);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](ErrorCode ec, size_t) { self->OnHeader(ec); });
  }

  // Parses what the buffer and the socket already hold, without waiting. A request usually
  // arrives whole, right after its connection or the previous response: it is then handled
  // here, in this turn of the I/O loop, instead of after two more trips through it behind
  // every other connection's work (the asynchronous read's completion, the composed
  // operation's). True when the headers are done (OnHeader went on from there) or the bytes
  // failed to parse (answered by OnHeader as the asynchronous read would); false when more is
  // needed, the socket had nothing more, or reading failed: the asynchronous read goes on.
  // Not inside itself: a request answered at once (e.g. /health) starts the next one from
  // within OnHeader, and pipelined requests would each add a level to the stack; that one
  // goes through the asynchronous read.
  bool ReadNow() {
    if (reading_now_) return false;
    reading_now_ = true;
    const bool handled = ParseAvailable();
    reading_now_ = false;
    return handled;
  }
  bool ParseAvailable() {
    parser_->eager(true);
    for (;;) {
      ErrorCode ec;
      if (buffer_.size() > 0) {
        buffer_.consume(parser_->put(buffer_.data(), ec));
        if (ec && ec != http::error::need_more) {
          OnHeader(ec);
          return true;
        }
        if (parser_->is_done()) {
          OnHeader(ErrorCode());
          return true;
        }
      }
      const size_t size = boost::beast::read_size(buffer_, 65536);
      if (size == 0) return false;
      const auto space = buffer_.prepare(size);
      const ssize_t n = ::recv(socket_.native_handle(), space.data(), space.size(), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // nothing more now, the end of the stream, or an error: the asynchronous read sees it
      buffer_.commit(static_cast<size_t>(n));
    }
    if (!parser_->is_header_done()) return false;
    OnHeader(ErrorCode());  // the body follows (OnHeader reads it)
    return true;
  }

  void OnHeader(ErrorCode ec) {
    if (phase_ != Phase::kHeader) return;
    if (ec == asio::error::operation_aborted && !timed_out_.ok()) return SendError(408, std::exchange(timed_out_, {}));
    if (ec == http::error::header_limit) {
      return SendError(431, absl::InvalidArgumentError(absl::StrCat("request headers exceed the limit of ",
                                                                    shared_->options.max_header_bytes, " bytes")));
    }
    if (ec == http::error::body_limit) return SendError(413, BodyTooLarge());  // from Content-Length
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset) {
      return Close();
    }
    if (ec) return SendError(400, absl::InvalidArgumentError(absl::StrCat("malformed HTTP request: ", ec.message())));
    const auto& header = parser_->get();
    http_minor_ = header.version() % 10;
    if (boost::optional<uint64_t> length = parser_->content_length();
        length.has_value() && *length > shared_->options.max_body_bytes) {
      return SendError(413, BodyTooLarge());
    }
    if (auto expect = header.find(http::field::expect);
        expect != header.end() &&
        absl::EqualsIgnoreCase(absl::string_view(expect->value().data(), expect->value().size()), "100-continue")) {
      Queue("HTTP/1.1 100 Continue\r\n\r\n");
      Flush();
    }
    if (parser_->is_done()) return OnBody(ErrorCode());
    phase_ = Phase::kBody;
    SetDeadline(shared_->options.body_timeout);
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](ErrorCode ec, size_t) { self->OnBody(ec); });
  }

  absl::Status BodyTooLarge() const {
    return absl::InvalidArgumentError(
        absl::StrCat("request body exceeds the limit of ", shared_->options.max_body_bytes, " bytes"));
  }

  void OnBody(ErrorCode ec) {
    if (phase_ != Phase::kHeader && phase_ != Phase::kBody) return;
    if (ec == asio::error::operation_aborted && !timed_out_.ok()) return SendError(408, std::exchange(timed_out_, {}));
    if (ec == http::error::body_limit) return SendError(413, BodyTooLarge());
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset) {
      return Close();
    }
    if (ec) return SendError(400, absl::InvalidArgumentError(absl::StrCat("malformed HTTP request: ", ec.message())));
    ClearDeadline();
    http::request<http::string_body> message = parser_->release();
    parser_.reset();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.path = request.target.substr(0, request.target.find('?'));
    if (auto type = message.find(http::field::content_type); type != message.end()) {
      request.content_type = std::string(type->value());
    }
    if (auto auth = message.find(http::field::authorization); auth != message.end()) {
      request.authorization = std::string(auth->value());
    }
    request.body = std::move(message.body());
    request.arrival = arrival_;
    keep_alive_ = message.keep_alive();
    phase_ = Phase::kHandling;
    ++seq_;
    response_started_ = response_done_ = streaming_ = chunked_ = false;
    pipelined_ = buffer_.size() > 0;
    if (!pipelined_) WatchReadable();
    shared_->handler(std::make_shared<HttpExchange>(shared_from_this(), seq_, std::move(request)));
  }

  // A response the transport makes itself; the connection closes after it.
  void SendError(int status, const absl::Status& error) {
    phase_ = Phase::kHandling;
    ++seq_;
    response_started_ = response_done_ = streaming_ = chunked_ = false;
    keep_alive_ = false;
    Respond(seq_, status, "application/json", shared_->error_body(status, error), {});
  }

  std::string Head(int status, absl::string_view content_type, const std::vector<HttpHeader>& headers) const {
    std::string head = StatusLine(status);
    absl::StrAppend(&head, "Content-Type: ", content_type, "\r\n");
    for (const HttpHeader& h : headers) absl::StrAppend(&head, h.name, ": ", h.value, "\r\n");
    if (!keep_alive_) {
      head += "Connection: close\r\n";
    } else if (http_minor_ == 0) {
      head += "Connection: keep-alive\r\n";
    }
    return head;
  }

  // Output. Queue adds bytes; Flush sends everything queued, gathered into one sendmsg, at
  // once while the socket takes it (the common case: no completion handler, no second trip
  // through the I/O loop), and waits for the socket to become writable only when it is full.
  // A closure run through Post is corked: its writes (a stream's head and first events, say)
  // leave together when it returns.
  void Queue(std::string bytes) {
    if (phase_ == Phase::kClosed || bytes.empty()) return;
    pending_bytes_ += bytes.size();
    out_.push_back(std::move(bytes));
    if (pending_bytes_ > shared_->options.max_pending_write_bytes) return Close();  // it does not read
  }

  // The calls queued by Post, in order, corked. Each is destroyed once it ran (it may hold the
  // last reference to an exchange, whose destructor queues again: into the next batch).
  void RunInbox() {
    std::vector<std::function<void()>> batch;
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      batch.swap(inbox_);
      inbox_posted_ = false;
    }
    ++corked_;
    for (std::function<void()>& fn : batch) {
      fn();
      fn = nullptr;
    }
    --corked_;
    Flush();
  }

  void Flush() {
    if (writing_ || corked_ > 0 || phase_ == Phase::kClosed) return;
    while (out_sent_ < out_.size()) {
      // Up to 64 pieces a call (a stream's events are 3 each: a burst of them run from the
      // inbox, or queued while the socket was full); what is left goes in the next round.
      std::array<iovec, 64> pieces;
      msghdr message{};
      message.msg_iov = pieces.data();
      for (size_t i = out_sent_; i < out_.size() && message.msg_iovlen < pieces.size(); ++i) {
        const size_t skip = i == out_sent_ ? out_front_sent_ : 0;
        pieces[message.msg_iovlen++] = iovec{out_[i].data() + skip, out_[i].size() - skip};
      }
      const ssize_t n = ::sendmsg(socket_.native_handle(), &message, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) return Close();
      Consume(static_cast<size_t>(n));
    }
    if (out_sent_ < out_.size()) {  // the socket is full: the rest when it drains
      writing_ = true;
      socket_.async_wait(tcp::socket::wait_write, [self = shared_from_this()](ErrorCode ec) {
        self->writing_ = false;
        if (self->phase_ == Phase::kClosed) return;
        if (ec) return self->Close();
        self->Flush();
      });
      return;
    }
    if (response_done_ && phase_ == Phase::kHandling) AfterResponse();
  }

  // `n` more bytes of out_ were sent.
  void Consume(size_t n) {
    pending_bytes_ -= n;
    n += out_front_sent_;
    while (out_sent_ < out_.size() && n >= out_[out_sent_].size()) {
      n -= out_[out_sent_].size();
      out_[out_sent_++] = std::string();  // freed now: a slow reader's backlog can be large
    }
    out_front_sent_ = n;
    if (out_sent_ == out_.size() || (out_sent_ >= 64 && 2 * out_sent_ >= out_.size())) {
      out_.erase(out_.begin(), out_.begin() + static_cast<ptrdiff_t>(out_sent_));  // a reader that never catches up
      out_sent_ = 0;
    }
  }

  void FinishResponse() {
    response_done_ = true;
    client_gone_ = nullptr;
    Flush();  // then AfterResponse, once everything is sent
  }

  void AfterResponse() {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      stopping = shared_->stopping;
    }
    if (!keep_alive_ || stopping) return Linger();
    if (pipelined_ || buffer_.size() > 0) {
      arrival_ = absl::Now();
      return StartHeader();
    }
    phase_ = Phase::kIdle;
    SetDeadline(shared_->options.keep_alive_timeout);
    WatchReadable();
  }

  // Closing with unread input would reset the connection and could discard the response the
  // client has not read yet: shut down the sending side, read and drop what the client still
  // sends for a moment, then close.
  void Linger() {
    phase_ = Phase::kLinger;
    ErrorCode ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    SetDeadline(absl::Seconds(1));
    buffer_.clear();
    Drain();
  }
  void Drain() {  // into the read buffer, which no request needs any more
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](ErrorCode ec, size_t) {
      if (self->phase_ != Phase::kLinger) return;
      if (ec) return self->Close();
      self->Drain();
    });
  }

  const std::shared_ptr<HttpTransport::Shared> shared_;
  const Strand strand_;  // the socket's executor
  tcp::socket socket_;
  asio::steady_timer timer_;
  uint64_t deadline_gen_ = 0;
  absl::Status timed_out_;  // not OK: the current deadline passed (why), the read in progress is being cancelled
  Phase phase_ = Phase::kIdle;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  absl::Time arrival_;
  unsigned http_minor_ = 1;
  bool keep_alive_ = true;
  bool watching_ = false;
  char peeked_ = 0;  // WatchReadable's byte, left in the socket
  bool pipelined_ = false;
  bool reading_now_ = false;  // inside ReadNow
  // The current exchange.
  uint64_t seq_ = 0;
  bool response_started_ = false;
  bool response_done_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  std::function<void()> client_gone_;
  // Output: out_[out_sent_...] is still to send, the first of them from out_front_sent_.
  std::vector<std::string> out_;
  size_t out_sent_ = 0;
  size_t out_front_sent_ = 0;
  size_t pending_bytes_ = 0;
  bool writing_ = false;  // waiting for the socket to become writable
  int corked_ = 0;        // inside RunInbox: Flush when it returns
  // Post's queue from other threads (the only members not confined to the strand).
  std::mutex inbox_mu_;
  std::vector<std::function<void()>> inbox_;  // guarded by inbox_mu_
  bool inbox_posted_ = false;                 // guarded by inbox_mu_: a RunInbox is queued and has not taken it
};

HttpExchange::HttpExchange(std::shared_ptr<HttpConnection> connection, uint64_t seq, HttpRequest request)
    : connection_(std::move(connection)), seq_(seq), request_(std::move(request)) {}

HttpExchange::~HttpExchange() {
  connection_->Post([c = connection_, seq = seq_] { c->Dropped(seq); });
}

void HttpExchange::Post(std::function<void()> fn) { connection_->Post(std::move(fn)); }

void HttpExchange::Respond(int status, absl::string_view content_type, std::string body,
                           std::vector<HttpHeader> headers) {
  connection_->Post([c = connection_, seq = seq_, status, type = std::string(content_type), body = std::move(body),
        headers = std::move(headers)]() mutable { c->Respond(seq, status, type, std::move(body), headers); }, /*inline_ok=*/true);
}

void HttpExchange::StartStream(int status, absl::string_view content_type, std::vector<HttpHeader> headers) {
  connection_->Post([c = connection_, seq = seq_, status, type = std::string(content_type), headers = std::move(headers)] {
    c->StartStream(seq, status, type, headers);
  }, /*inline_ok=*/true);
}

void HttpExchange::Write(std::string data) {
  connection_->Post([c = connection_, seq = seq_, data = std::move(data)]() mutable { c->Write(seq, std::move(data)); }, /*inline_ok=*/true);
}

void HttpExchange::End(std::string last) {
  connection_->Post([c = connection_, seq = seq_, last = std::move(last)]() mutable { c->End(seq, std::move(last)); }, /*inline_ok=*/true);
}

void HttpExchange::OnClientGone(std::function<void()> fn) {
  connection_->Post(
      [c = connection_, seq = seq_, fn = std::move(fn)]() mutable { c->SetClientGone(seq, std::move(fn)); },
      /*inline_ok=*/true);
}

HttpTransport::HttpTransport(HttpTransportOptions options, HttpHandler handler, HttpErrorBody error_body)
    : shared_(std::make_shared<Shared>(std::move(options), std::move(handler), std::move(error_body))) {}

HttpTransport::~HttpTransport() { Shutdown(); }

absl::Status HttpTransport::Start() {
  if (started_) return absl::FailedPreconditionError("the HTTP server is already started");
  acceptor_ = std::make_shared<HttpAcceptor>(
      shared_->ioc, shared_->options.max_connections, [shared = shared_.get()] { return shared->open.load(); },
      [shared = shared_](tcp::socket socket, Strand strand, bool over_limit) {  // holds Shared, as connections do
        auto connection = std::make_shared<HttpConnection>(shared, std::move(socket), std::move(strand));
        asio::dispatch(connection->executor(), [connection, over_limit] { connection->Start(over_limit); });
      });
  absl::Status bound = acceptor_->Bind(shared_->options.host, shared_->options.port, &port_);
  if (!bound.ok()) {
    port_ = 0;
    return bound;
  }
  started_ = true;
  acceptor_->Accept();
  auto guard = std::make_shared<asio::executor_work_guard<asio::io_context::executor_type>>(shared_->ioc.get_executor());
  work_guard_ = guard;
  for (int i = 0; i < std::max(1, shared_->options.io_threads); ++i) {
    threads_.emplace_back([shared = shared_] {
      pthread_setname_np(pthread_self(), "tpserve-http");  // for top -H, perf, and bench/frontend_bench
      shared->ioc.run();
    });
  }
  return absl::OkStatus();
}

void HttpTransport::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  if (!started_) return;
  acceptor_->Close();
  std::vector<std::weak_ptr<HttpConnection>> live;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stopping = true;
    for (auto& [ptr, weak] : shared_->live) live.push_back(weak);
  }
  for (auto& weak : live) {
    if (std::shared_ptr<HttpConnection> c = weak.lock()) asio::post(c->executor(), [c] { c->Close(); });
  }
  work_guard_.reset();  // run() returns once every connection has closed
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  {
    std::unique_lock<std::shared_mutex> lock(shared_->post_mu);
    shared_->io_joined = true;  // exchanges' calls from now on are dropped (HttpConnection::Post)
  }
  // Run here what was posted between the threads' run() returning and io_joined: queued, it
  // would hold its connection forever. Every connection is closed by now: no I/O follows.
  shared_->ioc.restart();
  shared_->ioc.poll();
  acceptor_.reset();
}

int64_t HttpTransport::open_connections() const { return shared_->open.load(); }

}  // namespace tpserve

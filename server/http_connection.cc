#include "server/http_connection.h"

#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <future>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/client_addresses.h"
#include "server/http_listener_state.h"
#include "server/http_request_fields.h"
#include "server/service_core.h"

namespace attnscope::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using http_internal::ConnectionBase;
using http_internal::ToSteady;

// How long a connection closed by the server keeps reading (and dropping) what its client still
// sends: closing a socket with unread input resets the connection, and a client still sending
// a refused body could lose the answer that says why.
constexpr std::chrono::seconds kLingerTime(2);
// And how much of it beyond the largest body taken (HttpLimits::max_body_bytes): a client sending
// a refused 100 MB body as fast as loopback allows kept a core busy reading for all of
// kLingerTime, while one whose body is just over the limit and that reads its answer only once it
// has sent everything (cpp-httplib) must still get it.
constexpr int64_t kLingerBytes = 1 << 20;
// How often a call's socket is checked for its client closing while it holds unread input (a
// pipelined request, a TLS alert), when waiting for it to become readable would return at once.
constexpr std::chrono::milliseconds kPeerPollInterval(100);
constexpr size_t kReadChunk = 16 << 10;
constexpr unsigned char kTlsHandshakeRecord = 22;
// A unary answer's body is written in pieces of this many bytes, each within
// HttpLimits::write_timeout: a client reading an 80 MB answer steadily at 100 KB/s was cut after
// 7 MB when the whole answer had one deadline, while one that reads less than a piece per
// write_timeout (35 KB/s at the defaults) still frees the answer.
constexpr size_t kAnswerPiece = 1 << 20;
// The first bytes of each body, which HttpLimits::max_buffered_body_bytes does not count: as many
// as a request's headers may take, so that a small call is never refused for others' large bodies.
constexpr int64_t kUncountedBodyBytes = 64 << 10;

// True when the client of socket `fd` has closed its end (or the connection failed); false while
// it may still read the answer. Leaves any unread input in place.
bool PeerClosed(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  // Input is waiting: the client may still have closed after sending it.
  pollfd check{fd, POLLRDHUP, 0};
  return poll(&check, 1, 0) > 0 && (check.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Errors that mean the client left, or took too long: the connection closes without an answer.
bool Quiet(const beast::error_code& error) {
  return error == http::error::end_of_stream || error == http::error::partial_message ||
         error == asio::error::eof || error == beast::error::timeout ||
         error == asio::error::operation_aborted || error == asio::error::connection_reset ||
         error == asio::error::broken_pipe || error == asio::ssl::error::stream_truncated;
}

// The client's source (SourceOf) of an accepted connection; "" when it has already gone.
template <typename Stream>
std::string SourceOfStream(Stream& stream) {
  beast::error_code error;
  const tcp::endpoint remote = beast::get_lowest_layer(stream).socket().remote_endpoint(error);
  return error ? std::string() : SourceOf(remote);
}

template <typename Stream>
class Connection;

// One request's HttpExchange: what its handler has sent so far, and its connection.
template <typename Stream>
class Exchange final : public HttpExchange {
 public:
  explicit Exchange(std::shared_ptr<Connection<Stream>> connection)
      : connection_(std::move(connection)) {}

  bool ClientGone() const override { return connection_->client_gone(); }
  bool GraceOver() const override { return connection_->grace_over(); }
  std::string ClientSource() const override { return connection_->client_source(); }
  void Respond(HttpResponse response, std::shared_ptr<const void> hold) override {
    answered_ = true;
    connection_->Respond(std::move(response), std::move(hold));
  }
  bool StartStream(HttpResponse head) override {
    answered_ = true;
    streamed_ = true;
    return connection_->StartStream(std::move(head));
  }
  bool Write(std::string data) override { return connection_->Write(std::move(data)); }

  bool answered() const { return answered_; }
  bool streamed() const { return streamed_; }

 private:
  const std::shared_ptr<Connection<Stream>> connection_;
  bool answered_ = false;
  bool streamed_ = false;
};

// One client connection: its requests, one at a time, and their answers. Everything runs on the
// connection's strand except the calls of a handler's Exchange, which post their work there.
template <typename Stream>
class Connection : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  Connection(HttpListener::State* state, Stream stream)
      : state_(state),
        stream_(std::move(stream)),
        client_source_(SourceOfStream(stream_)),
        buffer_(state->limits.max_header_bytes + kReadChunk),
        peer_poll_(stream_.get_executor()) {}
  ~Connection() override {
    UncountBody();
    state_->Unregister(this);
  }

  void Run() {
    state_->Register(this, this->shared_from_this());
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      WaitForRequest(/*fresh=*/true);
    } else {
      // The first byte tells a TLS record (a handshake's is 22, RFC 8446 5.1) from plain HTTP,
      // which gets a plain answer saying so, as nginx gives: a failed handshake reached curl as
      // "Empty reply from server".
      Lowest().expires_after(ToSteady(state_->limits.header_timeout));
      Lowest().async_read_some(asio::buffer(&first_byte_, 1), [self = this->shared_from_this()](
                                                                  beast::error_code error, size_t) {
        if (error) return self->Close();
        if (self->first_byte_ != kTlsHandshakeRecord) return self->RefusePlainHttp();
        self->stream_.async_handshake(asio::ssl::stream_base::server,
                                      asio::buffer(&self->first_byte_, 1),
                                      [self](beast::error_code error, size_t) {
                                        if (error) return self->Close();
                                        self->WaitForRequest(/*fresh=*/true);
                                      });
      });
    }
  }

  void Drain() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (self->idle_) self->Close();
    });
  }
  void ForceClose() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Close(); });
  }
  int64_t WaitingSince() const override { return waiting_since_.load(); }

  bool client_gone() const { return client_gone_.load(); }
  bool grace_over() const { return state_->grace_over.load(); }
  const std::string& client_source() const { return client_source_; }

  // The Exchange's calls, from the handler's thread.
  void Respond(HttpResponse response, std::shared_ptr<const void> hold) {
    asio::post(stream_.get_executor(),
               [self = this->shared_from_this(), response = std::move(response),
                hold = std::move(hold)]() mutable {
                 self->StopWatching();
                 self->Send(std::move(response), std::move(hold));
               });
  }

  bool StartStream(HttpResponse head) {
    return OnStrand([this, &head](auto done) {
      stream_head_.emplace(std::move(head.base()));
      AddAnswerHeaders(*stream_head_);
      stream_head_->version(version_);
      // HTTP/1.0 has no chunked encoding: the stream's end is the connection's.
      chunked_ = version_ >= 11;
      stream_head_->chunked(chunked_);
      stream_head_->keep_alive(chunked_ && keep_alive_ && !state_->draining.load());
      serializer_.emplace(*stream_head_);
      Lowest().expires_after(ToSteady(state_->limits.write_timeout));
      http::async_write_header(stream_, *serializer_,
                               [done](beast::error_code error, size_t) { done(!error); });
    });
  }

  bool Write(std::string data) {
    if (client_gone_.load() || data.empty()) return !client_gone_.load();
    return OnStrand([this, &data](auto done) {
      Lowest().expires_after(ToSteady(state_->limits.write_timeout));
      auto written = [done](beast::error_code error, size_t) { done(!error); };
      if (chunked_) {
        asio::async_write(stream_, http::make_chunk(asio::buffer(data)), written);
      } else {
        asio::async_write(stream_, asio::buffer(data), written);
      }
    });
  }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // Runs `start(done)` on the strand and waits for the asynchronous operation it starts to call
  // done(ok). A failed operation closes the connection: the client is gone.
  template <typename Start>
  bool OnStrand(Start start) {
    std::promise<bool> promise;
    std::future<bool> result = promise.get_future();
    asio::post(stream_.get_executor(), [this, self = this->shared_from_this(), &start, &promise] {
      if (closed_) {
        client_gone_ = true;
        return promise.set_value(false);
      }
      start([this, self, &promise](bool ok) {
        if (!ok) {
          client_gone_ = true;
          Close();
        }
        promise.set_value(ok);
      });
    });
    return result.get();
  }

  // Waits for the first byte of a request, unless one is buffered already: on a new connection
  // within the header deadline, which then covers the whole header; on a kept-alive one within
  // the idle timeout, the header deadline starting at that byte.
  void WaitForRequest(bool fresh) {
    waiting_since_ = std::chrono::steady_clock::now().time_since_epoch().count();
    answer_headers_.clear();
    if (state_->draining.load()) return GracefulClose();
    const auto now = std::chrono::steady_clock::now();
    header_deadline_ = now + ToSteady(state_->limits.header_timeout);
    if (buffer_.size() > 0) return ReadHeader();
    idle_ = true;
    Lowest().expires_at(fresh ? header_deadline_ : now + ToSteady(state_->limits.idle_timeout));
    stream_.async_read_some(
        buffer_.prepare(kReadChunk),
        [self = this->shared_from_this(), fresh](beast::error_code error, size_t bytes) {
          self->idle_ = false;
          if (error) return self->Close();
          self->buffer_.commit(bytes);
          if (!fresh) {
            self->header_deadline_ =
                std::chrono::steady_clock::now() + ToSteady(self->state_->limits.header_timeout);
          }
          self->ReadHeader();
        });
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(state_->limits.max_header_bytes);
    // Checked after the handler has screened the headers, so that a refusal of the origin or
    // the key comes first, and a Content-Length over it gets a JSON answer instead of a bare
    // parse error.
    parser_->body_limit(boost::none);
    Lowest().expires_at(header_deadline_);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code error, size_t) {
                              self->OnHeader(error);
                            });
  }

  void OnHeader(beast::error_code error) {
    // Read or refused, the request is no longer waited for: its connection is not the one to
    // close for room (MakeRoom).
    waiting_since_ = std::numeric_limits<int64_t>::max();
    if (error == http::error::header_limit || error == http::error::buffer_overflow) {
      // The parser takes the request line out of the buffer once it has read it (and set the
      // target): only a request line still unread can be the one that is too long.
      if (parser_->get().target().empty()) {
        const std::string_view buffered(static_cast<const char*>(buffer_.data().data()),
                                        buffer_.size());
        const size_t line_end = buffered.find("\r\n");
        if (line_end == std::string_view::npos || line_end > state_->limits.max_target_bytes) {
          // Without its end in the buffer, the line's length is unknown: more than was read.
          return Refuse(line_end == std::string_view::npos
                            ? UriTooLong(absl::StrCat("more than ", buffered.size()))
                            : UriTooLong(absl::StrCat(line_end)));
        }
      }
      return Refuse(ErrorResponse(
          absl::ResourceExhaustedError(absl::StrCat(
              "request headers: expected at most ", state_->limits.max_header_bytes,
              " bytes with the request line, got more; send fewer or shorter headers")),
          431));
    }
    if (error) {
      if (Quiet(error)) return Close();
      return Refuse(ErrorResponse(
          absl::InvalidArgumentError(absl::StrCat(
              "request: not valid HTTP/1.1 (", error.message(),
              "); send a request line, then one 'Name: value' header a line, then a blank line")),
          400));
    }
    const HttpRequest& request = parser_->get();
    version_ = request.version();
    keep_alive_ = request.keep_alive();
    head_ = request.method() == http::verb::head;
    if (request.target().size() > state_->limits.max_target_bytes) {
      return Refuse(UriTooLong(absl::StrCat(request.target().size())));
    }
    NormalizeTarget(parser_->get());
    // The parser reads a body as chunks only when "chunked" is the last coding, and otherwise as no
    // body at all, whose bytes would then be read as the next request: refused, and the
    // connection closed (RFC 9112, section 6.3).
    if (const auto coding = request.find(http::field::transfer_encoding);
        coding != request.end() && !boost::beast::iequals(coding->value(), "chunked")) {
      return Refuse(ErrorResponse(
          absl::InvalidArgumentError(absl::StrCat(
              "request Transfer-Encoding '",
              absl::string_view(coding->value().data(), coding->value().size()).substr(0, 64),
              "': expected chunked or none; send the body with a Content-Length or in chunks")),
          400));
    }
    // The one expectation HTTP defines is 100-continue; any other cannot be met (RFC 9110,
    // section 10.1.1).
    if (const auto expect = request.find(http::field::expect);
        expect != request.end() && !boost::beast::iequals(expect->value(), "100-continue")) {
      return Refuse(ErrorResponse(
          absl::FailedPreconditionError(absl::StrCat(
              "request Expect '",
              absl::string_view(expect->value().data(), expect->value().size()).substr(0, 64),
              "': expected 100-continue or none; drop the header")),
          417));
    }
    if (std::optional<HttpResponse> refusal = state_->handler->Screen(request, answer_headers_)) {
      return Refuse(*std::move(refusal));
    }
    const int64_t limit = state_->limits.max_body_bytes;
    if (const boost::optional<uint64_t> length = parser_->content_length();
        length.has_value() && *length > static_cast<uint64_t>(limit)) {
      return RefuseScreened(TooLarge(absl::StrCat(*length)), 413);
    }
    parser_->body_limit(static_cast<uint64_t>(limit));
    if (boost::beast::iequals(request[http::field::expect], "100-continue")) {
      auto go_on =
          std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
      Lowest().expires_after(ToSteady(state_->limits.write_timeout));
      return http::async_write(
          stream_, *go_on,
          [self = this->shared_from_this(), go_on](beast::error_code error, size_t) {
            if (error) return self->Close();
            self->ReadBody();
          });
    }
    ReadBody();
  }

  // Reads the body a piece at a time, within one deadline, counting each piece against the
  // bodies all connections may hold at once.
  void ReadBody() {
    // A request without a body is done with its headers.
    if (parser_->is_done()) return OnBody({});
    Lowest().expires_after(ToSteady(state_->limits.body_timeout));
    ReadSomeBody();
  }
  void ReadSomeBody() {
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = this->shared_from_this()](beast::error_code error, size_t) {
                            self->OnSomeBody(error);
                          });
  }
  void OnSomeBody(beast::error_code error) {
    bool over_share = false;
    if (!error && !CountBody(&over_share)) {
      return RefuseScreened(TooManyBodies(over_share), 429,
                            over_share ? "body_bytes_client_limit" : "body_bytes_limit");
    }
    if (error || parser_->is_done()) return OnBody(error);
    ReadSomeBody();
  }

  // False, counting nothing, when the body read so far would take the bodies being read past
  // HttpLimits::max_buffered_body_bytes or this client's share of it (State::CountBodyBytes).
  bool CountBody(bool* over_share) {
    const int64_t size = static_cast<int64_t>(parser_->get().body().capacity());
    const int64_t more = std::max<int64_t>(0, size - kUncountedBodyBytes) - counted_body_bytes_;
    if (more <= 0) return true;
    if (!state_->CountBodyBytes(client_source_, counted_body_bytes_, more, over_share)) {
      return false;
    }
    counted_body_bytes_ += more;
    return true;
  }
  void UncountBody() {
    state_->UncountBodyBytes(client_source_, counted_body_bytes_);
    counted_body_bytes_ = 0;
  }

  void OnBody(beast::error_code error) {
    UncountBody();
    if (error == http::error::body_limit) return RefuseScreened(TooLarge("more"), 413);
    if (error) {
      if (Quiet(error)) return Close();
      return RefuseScreened(absl::InvalidArgumentError(absl::StrCat(
                                "request body: not valid HTTP/1.1 framing (", error.message(),
                                "); send a Content-Length or whole chunks")),
                            400);
    }
    auto request = std::make_shared<HttpRequest>(parser_->release());
    parser_.reset();
    const int calls = state_->calls.fetch_add(1);
    if (state_->max_waiting > 0 && calls >= state_->workers_count + state_->max_waiting) {
      state_->calls.fetch_sub(1);
      const absl::Status busy = Busy();
      state_->handler->OnRefused(*request, busy, 429, "concurrency_limit");
      return Send(ErrorResponse(busy));
    }
    Lowest().expires_never();
    WatchPeer();
    asio::post(state_->workers, [self = this->shared_from_this(), request] {
      Exchange<Stream> exchange(self);
      self->state_->handler->Handle(*request, exchange);
      self->state_->calls.fetch_sub(1);
      if (!exchange.answered()) {
        exchange.Respond(ErrorResponse(absl::InternalError("the request got no answer (a bug)")),
                         /*hold=*/nullptr);
      }
      if (exchange.streamed()) {
        asio::post(self->stream_.get_executor(), [self] { self->EndStream(); });
      }
    });
  }

  // After the handler of a stream has returned: the last chunk.
  void EndStream() {
    StopWatching();
    if (closed_) return;
    if (!chunked_) return GracefulClose();
    const bool keep_alive = stream_head_->keep_alive() && !state_->draining.load();
    stream_head_.reset();
    serializer_.reset();
    Lowest().expires_after(ToSteady(state_->limits.write_timeout));
    asio::async_write(
        stream_, http::make_chunk_last(),
        [self = this->shared_from_this(), keep_alive](beast::error_code error, size_t) {
          if (error) return self->Close();
          self->AfterAnswer(keep_alive);
        });
  }

  void AfterAnswer(bool keep_alive) {
    if (keep_alive && !state_->draining.load()) {
      WaitForRequest(/*fresh=*/false);
    } else {
      GracefulClose();
    }
  }

  // `bytes`: how long the request line is, or "more than N".
  HttpResponse UriTooLong(const std::string& bytes) const {
    return ErrorResponse(
        absl::ResourceExhaustedError(absl::StrCat(
            "request URI: expected at most ", state_->limits.max_target_bytes, " bytes, got ",
            bytes, "; send the message in a POST body instead of the GET form's query")),
        414);
  }

  absl::Status Busy() const {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server is answering ", state_->workers_count, " HTTP requests (--http_threads) and ",
        state_->max_waiting,
        " more wait for one (--max_concurrent_requests), its limit; retry with backoff"));
  }

  absl::Status TooManyBodies(bool over_share) const {
    if (over_share) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "request body: the bodies this client (its address) is sending at once would hold over "
          "its share of the ",
          state_->max_buffered_body_bytes,
          " bytes of request bodies the server receives together (half, less while the server is "
          "near that limit, so that one client cannot take them all); send one body after "
          "another, or retry with backoff"));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "request body: the server is receiving ", state_->max_buffered_body_bytes,
        " bytes of request bodies from its clients together, its limit; retry with backoff"));
  }

  absl::Status TooLarge(const std::string& got) const {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request body: expected at most ", state_->limits.max_body_bytes, " bytes (",
        state_->limits.body_limit_source, "), got ", got, "; send shorter texts or fewer inputs"));
  }

  // The handler's fields for every answer to the request, unless the answer sets its own.
  void AddAnswerHeaders(HttpResponse::header_type& response) const {
    for (const auto& field : answer_headers_) {
      if (response.count(field.name_string()) == 0) {
        response.set(field.name_string(), field.value());
      }
    }
    response.set("X-Content-Type-Options", "nosniff");
  }
  template <typename Body>
  void AddAnswerHeaders(http::response<Body>& response) const {
    AddAnswerHeaders(response.base());
  }

  // Answers a request whose body was not read (or not all of it): the connection cannot carry
  // another request, and what was read of it is dropped at once.
  void Refuse(HttpResponse response) {
    keep_alive_ = false;
    UncountBody();
    parser_.reset();
    Send(std::move(response));
  }

  // Refuses the request being read, which the handler's Screen let through: the handler hears of
  // it, so that its metrics count every call (`rejection` as HttpHandler::OnRefused's).
  void RefuseScreened(const absl::Status& status, int http_status,
                      absl::string_view rejection = "") {
    state_->handler->OnRefused(parser_->get(), status, http_status, rejection);
    Refuse(ErrorResponse(status, http_status));
  }

  // Answers plain HTTP sent to the TLS port in plain HTTP, then closes.
  void RefusePlainHttp() {
    auto answer = std::make_shared<HttpResponse>(ErrorResponse(
        absl::InvalidArgumentError(
            "request: plain HTTP sent to a port that speaks HTTPS (--tls_cert_file); send it over "
            "TLS, to an https:// address"),
        400));
    AddAnswerHeaders(*answer);
    answer->keep_alive(false);
    answer->prepare_payload();
    Lowest().expires_after(ToSteady(state_->limits.write_timeout));
    http::async_write(Lowest(), *answer,
                      [self = this->shared_from_this(), answer](beast::error_code error, size_t) {
                        if (error) return self->Close();
                        self->GracefulClose();
                      });
  }

  // `hold` lives until the write ends.
  void Send(HttpResponse response, std::shared_ptr<const void> hold = nullptr) {
    if (closed_) return;
    AddAnswerHeaders(response);
    response.version(version_);
    response.keep_alive(keep_alive_ && response.keep_alive() && !state_->draining.load());
    response.prepare_payload();
    if (head_) {
      // HEAD is GET without the body (RFC 9110, section 9.3.2): the same headers, Content-Length
      // included.
      const uint64_t length = response.body().size();
      response.body().clear();
      response.content_length(length);
    }
    auto answer = std::make_shared<PendingAnswer>(std::move(response), std::move(hold));
    Lowest().expires_after(ToSteady(state_->limits.write_timeout));
    http::async_write_header(
        stream_, answer->serializer,
        [self = this->shared_from_this(), answer](beast::error_code error, size_t) {
          if (error) return self->Close();
          self->WriteAnswerBody(answer, /*offset=*/0);
        });
  }

  // An answer being written, and what its bytes hold (its place in the answer budget).
  struct PendingAnswer {
    PendingAnswer(HttpResponse answer, std::shared_ptr<const void> answer_hold)
        : response(std::move(answer)), serializer(response), hold(std::move(answer_hold)) {}
    HttpResponse response;
    // Writes the header only; the body goes out in pieces.
    http::response_serializer<http::string_body> serializer;
    std::shared_ptr<const void> hold;
  };
  void WriteAnswerBody(std::shared_ptr<PendingAnswer> answer, size_t offset) {
    const std::string& body = answer->response.body();
    if (offset >= body.size()) return AfterAnswer(answer->response.keep_alive());
    const size_t size = std::min(kAnswerPiece, body.size() - offset);
    Lowest().expires_after(ToSteady(state_->limits.write_timeout));
    asio::async_write(stream_, asio::buffer(body.data() + offset, size),
                      [self = this->shared_from_this(), answer, next = offset + size](
                          beast::error_code error, size_t) {
                        if (error) return self->Close();
                        self->WriteAnswerBody(answer, next);
                      });
  }

  // Watches the socket during a call: once the client closes its end, ClientGone turns true.
  void WatchPeer() {
    const uint64_t watch = ++watch_;
    Lowest().socket().async_wait(tcp::socket::wait_read,
                                 [self = this->shared_from_this(), watch](beast::error_code error) {
                                   if (error || watch != self->watch_) return;
                                   self->CheckPeer(watch);
                                 });
  }
  void CheckPeer(uint64_t watch) {
    if (PeerClosed(Lowest().socket().native_handle())) {
      client_gone_ = true;
      return;
    }
    peer_poll_.expires_after(kPeerPollInterval);
    peer_poll_.async_wait([self = this->shared_from_this(), watch](beast::error_code error) {
      if (error || watch != self->watch_) return;
      self->CheckPeer(watch);
    });
  }
  void StopWatching() {
    ++watch_;
    peer_poll_.cancel();
    // Only the watch waits on the socket now; the answer's writes start after this.
    beast::error_code ignored;
    Lowest().socket().cancel(ignored);
  }

  // Closes after an answer: no more writes, and what the client still sends is read and dropped
  // for a moment.
  void GracefulClose() {
    if (closed_) return;
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    linger_buffer_.resize(kReadChunk);
    Lowest().expires_after(kLingerTime);
    Discard();
  }
  void Discard() {
    Lowest().async_read_some(
        asio::buffer(linger_buffer_),
        [self = this->shared_from_this()](beast::error_code error, size_t read) {
          self->discarded_ += static_cast<int64_t>(read);
          if (error || self->discarded_ > self->state_->limits.max_body_bytes + kLingerBytes) {
            return self->Close();
          }
          self->Discard();
        });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    ++watch_;
    peer_poll_.cancel();
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  HttpListener::State* const state_;
  Stream stream_;
  const std::string client_source_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  // What this request's body counts against HttpLimits::max_buffered_body_bytes.
  int64_t counted_body_bytes_ = 0;
  HttpFields answer_headers_;
  unsigned version_ = 11;
  bool head_ = false;  // the request being answered is a HEAD
  bool keep_alive_ = true;
  bool idle_ = false;
  // WaitingSince(): from the connection's start (its TLS handshake included) and from each
  // WaitForRequest until the request's headers are read.
  std::atomic<int64_t> waiting_since_{std::chrono::steady_clock::now().time_since_epoch().count()};
  std::chrono::steady_clock::time_point header_deadline_;
  bool closed_ = false;
  uint64_t watch_ = 0;
  asio::steady_timer peer_poll_;
  // Set by the watch or a failed write, never cleared: the connection is done for.
  std::atomic<bool> client_gone_{false};
  // The stream being answered; a new request is read only after its end.
  bool chunked_ = false;
  std::optional<http::response<http::empty_body>> stream_head_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  std::vector<char> linger_buffer_;
  int64_t discarded_ = 0;
  // A TLS connection's first byte, read before its handshake.
  unsigned char first_byte_ = 0;
};

}  // namespace

void HttpListener::State::Serve(beast::tcp_stream stream) {
  std::make_shared<Connection<beast::tcp_stream>>(this, std::move(stream))->Run();
}

void HttpListener::State::Serve(beast::ssl_stream<beast::tcp_stream> stream) {
  std::make_shared<Connection<beast::ssl_stream<beast::tcp_stream>>>(this, std::move(stream))
      ->Run();
}

}  // namespace attnscope::server

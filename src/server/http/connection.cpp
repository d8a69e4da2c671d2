#include "server/http/connection.h"

#include <atomic>
#include <limits>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ubatch::server::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

namespace {

constexpr size_t kReadChunk = 4096;            // bytes asked per read_some
constexpr size_t kReadAhead = 64 << 10;        // bytes of a next request buffered while one is answered
// Lingering close (RFC 9112 §9.6): after an early refusal (413 on a body still arriving) the
// client may go on sending the body it announced before it reads our answer; closing while
// its bytes arrive sends RST, which can destroy the answer in its receive buffer. So the
// bytes are read and dropped — never parsed or kept — for a bounded time and amount.
constexpr double kLingerSeconds = 5.0;         // how long unread bytes are drained
constexpr size_t kLingerMaxBytes = 64 << 20;   // … and how many (a body a few times --max-body)

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

bool is_disconnect(const error_code& ec) {
  return ec == net::error::eof || ec == bhttp::error::end_of_stream || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == net::error::operation_aborted || ec == net::error::bad_descriptor ||
         ec == net::error::not_connected;
}

// Splits a request-target into path and query; an absolute-form target
// ("http://host/path?q") keeps only its path (RFC 9112 §3.2.2).
void split_target(const std::string& target, std::string& path, std::string& query) {
  std::string t = target;
  if (!t.empty() && t[0] != '/') {
    const size_t scheme = t.find("://");
    if (scheme != std::string::npos) {
      const size_t slash = t.find('/', scheme + 3);
      t = slash == std::string::npos ? "/" : t.substr(slash);
    }
  }
  const size_t q = t.find('?');
  path = t.substr(0, q);
  query = q == std::string::npos ? std::string() : t.substr(q + 1);
}

}  // namespace

const char* abort_reason_name(AbortReason r) {
  switch (r) {
    case AbortReason::ClientGone: return "client_gone";
    case AbortReason::SlowClient: return "slow_client";
    case AbortReason::ShuttingDown: return "shutting_down";
  }
  return "client_gone";
}

Response ServerCore::error_response(int status, const std::string& message, const Request* req) const {
  if (hooks.error) return hooks.error(status, message, req);
  Response res;
  res.status = status;
  res.set_content(message + "\n", "text/plain; charset=utf-8");
  return res;
}

// The handle route handlers hold (exchange.h); forwards to its connection while current.
class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(std::shared_ptr<Connection> conn, Request req) : conn_(std::move(conn)), req_(std::move(req)) {}
  const Request& request() const override { return req_; }
  void post(std::function<void()> fn) override { conn_->post(std::move(fn)); }
  std::function<void()> waker(std::function<void()> task) override { return conn_->waker(std::move(task)); }
  void after(std::chrono::milliseconds delay, std::function<void()> fn) override {
    if (conn_->is_current(this)) conn_->after(delay, std::move(fn), this);
  }
  void respond(Response res) override {
    if (conn_->is_current(this)) conn_->respond(std::move(res));
  }
  void start_stream(Response head) override {
    if (conn_->is_current(this)) conn_->start_stream(std::move(head));
  }
  bool write(std::string_view data) override { return conn_->is_current(this) && conn_->write_chunk(data); }
  void end_stream() override {
    if (conn_->is_current(this)) conn_->end_stream();
  }
  void on_abort(std::function<void(AbortReason)> fn) override {
    if (conn_->is_current(this)) abort_ = std::move(fn);
  }
  bool active() const override { return conn_->is_current(this); }

  std::shared_ptr<Connection> conn_;
  Request req_;
  std::function<void(AbortReason)> abort_;
  bool answered = false;  // the whole response is queued
  bool aborted = false;
};

Connection::Connection(std::shared_ptr<ServerCore> core, net::ip::tcp::socket socket, uint64_t id)
    : core_(std::move(core)),
      socket_(std::move(socket)),
      executor_(socket_.get_executor()),
      read_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()),
      exchange_timer_(socket_.get_executor()),
      buffer_(core_->limits.max_header_bytes + kReadAhead + kReadChunk),
      id_(id) {
  core_->stats.connections_open++;
}

Connection::~Connection() {
  core_->stats.connections_open--;
  {
    std::lock_guard<std::mutex> lock(core_->registry_mutex);
    core_->connections.erase(id_);
  }
  core_->registry_cv.notify_all();
}

void Connection::start() {
  error_code ec;
  // Tokens are small writes: without TCP_NODELAY, Nagle holds them ~40 ms and a stream
  // arrives in bursts.
  socket_.set_option(net::ip::tcp::no_delay(true), ec);
  const net::ip::tcp::endpoint remote = socket_.remote_endpoint(ec);
  if (!ec) {
    remote_addr_ = remote.address().to_string();
    remote_port_ = remote.port();
  }
  if (core_->draining) keep_alive_ = false;
  next_request();
}

void Connection::run_task(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    spdlog::error("http: connection {}: handler task failed: {}", id_, e.what());
    if (exchange_ && !head_sent_)
      respond(core_->error_response(500, std::string("internal error: ") + e.what(), &exchange_->req_));
    else
      close_now();
  }
}

void Connection::post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(core_->gate_mutex);
  if (!core_->gate_open) return;
  net::post(executor_, [self = shared_from_this(), fn = std::move(fn)] {
    if (self->phase_ == Phase::Closed) return;
    self->run_task(fn);
  });
}

void Connection::after(std::chrono::milliseconds delay, std::function<void()> fn, const ExchangeImpl* ex) {
  const uint64_t gen = ++exchange_timer_gen_;
  exchange_timer_.expires_after(delay);
  exchange_timer_.async_wait([self = shared_from_this(), gen, ex, fn = std::move(fn)](error_code ec) {
    if (ec || gen != self->exchange_timer_gen_ || !self->is_current(ex)) return;
    self->run_task(fn);
  });
}

void Connection::cancel_exchange_timer() {
  ++exchange_timer_gen_;
  exchange_timer_.cancel();
}

namespace {
// The state of one waker (Exchange::waker): nothing of Asio, so that whichever thread drops
// it last may do so after the I/O context is gone.
struct Waker {
  std::shared_ptr<ServerCore> core;
  std::weak_ptr<Connection> conn;
  std::function<void()> task;
  std::atomic<bool> pending{false};
};
}  // namespace

std::function<void()> Connection::waker(std::function<void()> task) {
  auto w = std::make_shared<Waker>();
  w->core = core_;
  w->conn = weak_from_this();
  w->task = std::move(task);
  return [w] {
    if (w->pending.exchange(true)) return;  // a run is already on its way
    // Under the gate the I/O context is alive, and so it stays while the connection reference
    // taken here is dropped (even if it is the last one).
    std::lock_guard<std::mutex> lock(w->core->gate_mutex);
    if (!w->core->gate_open) return;
    std::shared_ptr<Connection> c = w->conn.lock();
    if (!c) return;
    net::post(c->executor_, [w] {
      w->pending = false;
      std::shared_ptr<Connection> self = w->conn.lock();
      if (self && self->phase_ != Phase::Closed) w->task();
    });
  };
}

bool Connection::is_current(const ExchangeImpl* ex) const {
  return exchange_.get() == ex && ex != nullptr && !ex->answered && !ex->aborted && phase_ != Phase::Closed;
}

// --- reading -------------------------------------------------------------------------------

void Connection::arm_read_timer(Deadline kind, double secs) {
  read_deadline_ = kind;
  read_timed_out_ = false;
  const uint64_t gen = ++read_timer_gen_;
  read_timer_.expires_after(seconds(secs));
  read_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
    if (ec || gen != self->read_timer_gen_ || self->phase_ == Phase::Closed) return;
    self->read_timed_out_ = true;
    TransportStats& st = self->core_->stats;
    switch (self->read_deadline_) {
      case Deadline::Idle: st.timeouts_idle++; break;
      case Deadline::Header: st.timeouts_header++; break;
      case Deadline::Body: st.timeouts_body++; break;
      default: break;
    }
    if (self->read_deadline_ == Deadline::Idle || self->read_deadline_ == Deadline::Linger) return self->close_now();
    error_code ignored;
    self->socket_.cancel(ignored);  // the read completes with operation_aborted: on_header/on_body answer 408
  });
}

void Connection::cancel_read_timer() {
  ++read_timer_gen_;
  read_deadline_ = Deadline::None;
  read_timer_.cancel();
}

void Connection::next_request() {
  phase_ = Phase::Idle;
  if (buffer_.size() > 0) return read_header();  // pipelined: already here
  arm_read_timer(Deadline::Idle, core_->limits.idle_timeout_s);
  if (!reading_) read_some();
}

void Connection::read_some() {
  const size_t room = buffer_.max_size() - buffer_.size();
  if (room == 0) return;
  reading_ = true;
  socket_.async_read_some(buffer_.prepare(std::min(room, kReadChunk)),
                          [self = shared_from_this()](error_code ec, size_t n) { self->on_read_some(ec, n); });
}

void Connection::on_read_some(error_code ec, size_t n) {
  reading_ = false;
  if (phase_ == Phase::Closed) return;
  if (!ec) buffer_.commit(n);
  switch (phase_) {
    case Phase::Lingering:
      linger_bytes_ += buffer_.size();
      buffer_.consume(buffer_.size());
      if (ec || linger_bytes_ > kLingerMaxBytes) return close_now();
      return read_some();
    case Phase::Handling:
      // Reading ahead while a request is answered: the only way to notice that a client
      // waiting for a long completion went away. Bytes of a pipelined request are kept.
      if (ec) return close_now(AbortReason::ClientGone);
      if (buffer_.size() == 0) read_some();  // else: stop here; a later failed write says it
      return;
    case Phase::Idle:
      if (ec) return close_now();
      cancel_read_timer();
      return read_header();
    default:
      return;  // Header / Body use Beast's reads, not this one
  }
}

void Connection::read_header() {
  phase_ = Phase::Header;
  arm_read_timer(Deadline::Header, core_->limits.header_timeout_s);
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(core_->limits.max_header_bytes, UINT32_MAX)));
  // Checked after the API key and route (on_header). Not boost::none: Boost 1.74 compares
  // Content-Length against an empty optional as "over the limit".
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  reading_ = true;
  bhttp::async_read_header(socket_, buffer_, *parser_,
                           [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(error_code ec) {
  reading_ = false;
  if (phase_ == Phase::Closed) return;
  const bool timed_out = read_timed_out_;
  cancel_read_timer();
  if (ec) {
    if (timed_out) return fail(408, "timed out reading the request header");
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow)
      return fail(431, fmt::format("the request header is larger than {} bytes", core_->limits.max_header_bytes));
    if (is_disconnect(ec) || ec == bhttp::error::partial_message) return close_now();
    return fail(400, "malformed HTTP request: " + ec.message());
  }
  const auto& msg = parser_->get();
  Request req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  split_target(req.target, req.path, req.query);
  req.version = static_cast<int>(msg.version());
  for (const auto& field : msg) req.headers.emplace(std::string(field.name_string()), std::string(field.value()));
  req.remote_addr = remote_addr_;
  req.remote_port = remote_port_;

  keep_alive_ = parser_->keep_alive() && !core_->draining && !core_->stopping;
  head_sent_ = streaming_ = chunked_ = response_complete_ = false;
  head_only_ = req.method == "HEAD";
  const bool has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
  exchange_ = std::make_shared<ExchangeImpl>(shared_from_this(), std::move(req));
  core_->stats.exchanges_active++;
  const Request& r = exchange_->req_;

  auto early = [&](Response res) {
    if (has_body) return refuse(std::move(res));
    respond(std::move(res));
  };
  if (r.method == "OPTIONS") {
    const std::string methods = core_->router.allowed_methods(r.path);
    if (methods.empty()) return early(core_->error_response(404, fmt::format("no route for OPTIONS {}", r.path), &r));
    return early(core_->cors.options(r, methods));
  }
  if (core_->hooks.check)
    if (std::optional<Response> refusal = core_->hooks.check(r)) return early(std::move(*refusal));
  if (!core_->router.find(r.method, r.path))
    return early(core_->error_response(404, fmt::format("no route for {} {}", r.method, r.path), &r));
  const uint64_t limit = core_->limits.max_body_bytes;
  if (parser_->content_length() && *parser_->content_length() > limit)
    return refuse(core_->error_response(
        413, fmt::format("the request body ({} bytes) is larger than this server accepts ({} bytes, --max-body)",
                         *parser_->content_length(), limit),
        &r));
  if (!has_body) return dispatch();
  // Expect: 100-continue (RFC 9110 §10.1.1): the client waits for this before sending the
  // body; it comes only now that the key, the route and the size are known to be fine.
  if (r.version >= 11 && iequals(r.get_header_value("Expect"), "100-continue"))
    queue_write("HTTP/1.1 100 Continue\r\n\r\n");
  phase_ = Phase::Body;
  parser_->body_limit(limit);  // a chunked body is cut at the chunk that crosses it
  arm_read_timer(Deadline::Body, core_->limits.body_timeout_s);
  reading_ = true;
  bhttp::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
}

void Connection::on_body(error_code ec) {
  reading_ = false;
  if (phase_ == Phase::Closed) return;
  const bool timed_out = read_timed_out_;
  cancel_read_timer();
  if (ec) {
    const Request* r = exchange_ ? &exchange_->req_ : nullptr;
    if (timed_out) return fail(408, "timed out reading the request body");
    if (ec == bhttp::error::body_limit)
      return refuse(core_->error_response(
          413, fmt::format("the request body is larger than this server accepts ({} bytes, --max-body)",
                           core_->limits.max_body_bytes),
          r));
    if (is_disconnect(ec) || ec == bhttp::error::partial_message) return close_now();
    return fail(400, "malformed HTTP request body: " + ec.message());
  }
  exchange_->req_.body = std::move(parser_->get().body());
  parser_.reset();
  dispatch();
}

void Connection::dispatch() {
  phase_ = Phase::Handling;
  parser_.reset();
  std::shared_ptr<ExchangeImpl> ex = exchange_;
  const AsyncHandler* handler = core_->router.find(ex->req_.method, ex->req_.path);
  try {
    (*handler)(ex);
  } catch (const std::exception& e) {
    spdlog::error("http: {} {}: {}", ex->req_.method, ex->req_.path, e.what());
    if (is_current(ex.get()) && !head_sent_)
      respond(core_->error_response(500, std::string("internal error: ") + e.what(), &ex->req_));
    else if (is_current(ex.get()))
      close_now();
  }
  // Watch the connection while the answer is pending (see on_read_some).
  if (phase_ == Phase::Handling && !reading_ && buffer_.size() == 0) read_some();
}

// --- answering -----------------------------------------------------------------------------

void Connection::send_head(Response& res, Framing framing, size_t body_length) {
  const Request& r = exchange_->req_;
  core_->cors.decorate(r, res);
  if (core_->stopping || core_->draining) keep_alive_ = false;
  head_sent_ = true;
  if (core_->hooks.on_response) core_->hooks.on_response(r, res.status);
  queue_write(serialize_head(res, framing, body_length, keep_alive_));
}

void Connection::respond(Response res) {
  if (!exchange_ || head_sent_) return;
  send_head(res, Framing::Length, res.body.size());
  if (!head_only_ && !res.body.empty()) queue_write(std::move(res.body));
  exchange_->answered = true;
  exchange_->abort_ = nullptr;
  response_complete_ = true;
  if (!writing_) on_drained();
}

void Connection::refuse(Response res) {
  // The body (or the rest of it) is unread: the connection cannot carry another request.
  keep_alive_ = false;
  if (exchange_ && !head_sent_) return respond(std::move(res));
  close_now();
}

void Connection::fail(int status, const std::string& message) {
  core_->stats.bad_requests += status == 400;
  keep_alive_ = false;
  if (!exchange_) {
    // No request line yet (or it was unreadable): answer without a request.
    Response res = core_->error_response(status, message, nullptr);
    head_sent_ = true;
    if (core_->hooks.on_response) core_->hooks.on_response(Request{}, status);
    queue_write(serialize_head(res, Framing::Length, res.body.size(), false) + res.body);
    close_after_ = true;
    phase_ = Phase::Handling;
    if (!writing_) on_drained();
    return;
  }
  refuse(core_->error_response(status, message, &exchange_->req_));
}

void Connection::start_stream(Response head) {
  if (!exchange_ || head_sent_) return;
  streaming_ = true;
  // HTTP/1.1: chunked. HTTP/1.0 knows no chunked coding: the body ends when the connection
  // closes, so the head says neither Content-Length nor Transfer-Encoding (RFC 9112 §6.3,
  // rule 8) — a proxy speaking HTTP/1.0 upstream (nginx's default) then reads it whole.
  chunked_ = exchange_->req_.version >= 11;
  if (!chunked_) keep_alive_ = false;
  send_head(head, chunked_ ? Framing::Chunked : Framing::UntilClose, 0);
}

bool Connection::write_chunk(std::string_view data) {
  if (!streaming_ || response_complete_) return false;
  if (data.empty() || head_only_) return true;
  if (out_.size() + sending_.size() + data.size() > core_->limits.stream_buffer_bytes) {
    core_->stats.slow_clients++;
    spdlog::info("http: connection {}: the client reads too slowly ({} bytes queued), closing", id_,
                 out_.size() + sending_.size());
    close_now(AbortReason::SlowClient);
    return false;
  }
  if (chunked_) {
    std::string framed = fmt::format("{:x}\r\n", data.size());
    framed.append(data);
    framed += "\r\n";
    queue_write(std::move(framed));
  } else {
    queue_write(std::string(data));
  }
  return true;
}

void Connection::end_stream() {
  if (!streaming_ || response_complete_) return;
  if (chunked_ && !head_only_) queue_write("0\r\n\r\n");
  if (!chunked_) close_after_ = true;
  exchange_->answered = true;
  exchange_->abort_ = nullptr;
  response_complete_ = true;
  if (!writing_) on_drained();
}

// --- writing -------------------------------------------------------------------------------

void Connection::queue_write(std::string bytes) {
  if (phase_ == Phase::Closed) return;
  out_ += bytes;
  if (!writing_) flush();
}

void Connection::flush() {
  if (out_.empty()) return;
  sending_.swap(out_);
  out_.clear();
  writing_ = true;
  write_timed_out_ = false;
  const uint64_t gen = ++write_timer_gen_;
  write_timer_.expires_after(seconds(core_->limits.send_timeout_s));
  write_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
    if (ec || gen != self->write_timer_gen_ || self->phase_ == Phase::Closed) return;
    self->write_timed_out_ = true;
    self->core_->stats.timeouts_send++;
    spdlog::info("http: connection {}: a write made no progress for {} s, closing", self->id_,
                 self->core_->limits.send_timeout_s);
    self->close_now(AbortReason::SlowClient);
  });
  net::async_write(socket_, net::buffer(sending_),
                   [self = shared_from_this()](error_code ec, size_t) { self->on_write(ec); });
}

void Connection::on_write(error_code ec) {
  writing_ = false;
  ++write_timer_gen_;
  write_timer_.cancel();
  sending_.clear();
  if (phase_ == Phase::Closed) return;
  if (ec) return close_now(AbortReason::ClientGone);
  if (!out_.empty()) return flush();
  on_drained();
}

void Connection::on_drained() {
  if (phase_ == Phase::Closed || writing_) return;
  if (response_complete_) return finish_exchange();
  if (close_after_ && !exchange_) begin_close();
}

void Connection::finish_exchange() {
  cancel_exchange_timer();
  if (exchange_) {
    exchange_->abort_ = nullptr;
    exchange_.reset();
    core_->stats.exchanges_active--;
  }
  response_complete_ = head_sent_ = streaming_ = chunked_ = false;
  if (!keep_alive_ || close_after_ || core_->stopping) return begin_close();
  next_request();
}

// --- closing -------------------------------------------------------------------------------

void Connection::begin_close() {
  if (phase_ == Phase::Closed || phase_ == Phase::Lingering) return;
  if (core_->stopping) return close_now();  // everything is written; no time to linger
  // Lingering close: shut our side, then read and drop what the client still sends for a
  // moment, so that a client still sending a body it was told not to gets our response
  // instead of a reset (a close with unread bytes sends RST, which may discard it).
  phase_ = Phase::Lingering;
  error_code ec;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (ec) return close_now();
  linger_bytes_ = buffer_.size();
  buffer_.consume(buffer_.size());
  arm_read_timer(Deadline::Linger, kLingerSeconds);
  if (!reading_) read_some();
}

void Connection::abort_exchange(AbortReason why) {
  std::shared_ptr<ExchangeImpl> ex = exchange_;
  if (!ex || ex->answered || ex->aborted) return;
  std::function<void(AbortReason)> fn = std::move(ex->abort_);
  ex->abort_ = nullptr;
  if (why == AbortReason::ShuttingDown) {
    // The connection stays: the handler answers (a final event, or an error) right away.
    if (fn) fn(why);
    return;
  }
  ex->aborted = true;
  cancel_exchange_timer();
  if (!head_sent_ && core_->hooks.on_response) core_->hooks.on_response(ex->req_, 499);
  exchange_.reset();
  core_->stats.exchanges_active--;
  if (fn) fn(why);
}

void Connection::close_now(AbortReason why) {
  if (phase_ == Phase::Closed) return;
  phase_ = Phase::Closed;
  ++read_timer_gen_;
  ++write_timer_gen_;
  read_timer_.cancel();
  write_timer_.cancel();
  cancel_exchange_timer();
  error_code ec;
  if (why == AbortReason::SlowClient) {
    // The response is cut off and what is still queued will never be of use: reset the
    // connection (SO_LINGER 0: RST, the kernel's send buffer is dropped at once). A graceful
    // close would leave an orphaned socket trickling its buffer (up to tcp_wmem's maximum) to
    // a reader that stopped reading, one zero-window probe at a time, for minutes.
    socket_.set_option(net::socket_base::linger(true, 0), ec);
  } else {
    socket_.shutdown(net::ip::tcp::socket::shutdown_both, ec);
  }
  socket_.close(ec);
  // A Beast read still in flight holds a reference to the parser: its handler runs (with
  // operation_aborted) after this; the parser goes with the connection then.
  if (!reading_) parser_.reset();
  // The exchange still current (if any) could not be answered.
  std::shared_ptr<ExchangeImpl> ex = exchange_;
  if (ex && !ex->answered && !ex->aborted) {
    ex->aborted = true;
    std::function<void(AbortReason)> fn = std::move(ex->abort_);
    ex->abort_ = nullptr;
    if (!head_sent_ && core_->hooks.on_response) core_->hooks.on_response(ex->req_, 499);
    exchange_.reset();
    core_->stats.exchanges_active--;
    if (fn) fn(why == AbortReason::ShuttingDown ? AbortReason::ClientGone : why);
  } else if (ex) {
    exchange_.reset();
    core_->stats.exchanges_active--;
  }
}

void Connection::on_drain() {
  keep_alive_ = false;
  if (phase_ == Phase::Idle) close_now();
}

void Connection::on_stop() {
  keep_alive_ = false;
  switch (phase_) {
    case Phase::Handling:
      if (!response_complete_) abort_exchange(AbortReason::ShuttingDown);
      return;
    case Phase::Lingering:
    case Phase::Closed:
      return;
    default:
      return close_now();
  }
}

void Connection::force_close() { close_now(AbortReason::ShuttingDown); }

}  // namespace ubatch::server::http

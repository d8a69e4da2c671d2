// One accepted TCP connection of http::Server: reads requests with Beast's parser under the
// server's limits, runs their handlers, writes the responses in order. Internal to
// src/server/http/ (server.cpp creates connections; nothing else sees Beast types).
//
// Threads: everything of a connection runs on its strand. The server reaches it only by
// posting on_drain / on_stop / force_close.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "server/http/server.h"

namespace ubatch::server::http {

class Connection;
class ExchangeImpl;

// What the server and its connections share; it outlives every connection.
struct ServerCore {
  ServerCore(Limits l, CorsPolicy c, Router r, Hooks h)
      : limits(std::move(l)), cors(std::move(c)), router(std::move(r)), hooks(std::move(h)) {}
  const Limits limits;
  const CorsPolicy cors;
  const Router router;
  const Hooks hooks;
  TransportStats stats;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};

  // Exchange::post goes through this gate: closed before the I/O context is destroyed, so a
  // late post from the engine thread is dropped instead of touching a dead context.
  std::mutex gate_mutex;
  bool gate_open = true;

  // Open connections, for drain and stop.
  std::mutex registry_mutex;
  std::condition_variable registry_cv;
  std::map<uint64_t, std::weak_ptr<Connection>> connections;
  uint64_t next_id = 0;

  Response error_response(int status, const std::string& message, const Request* req) const;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ServerCore> core, boost::asio::ip::tcp::socket socket, uint64_t id);
  ~Connection();
  void start();
  const boost::asio::any_io_executor& executor() const { return executor_; }

  // Posted by the server (on the strand).
  void on_drain();
  void on_stop();
  void force_close();

  // For ExchangeImpl (on the strand unless said otherwise).
  void post(std::function<void()> fn);  // any thread
  std::function<void()> waker(std::function<void()> task);  // see Exchange::waker
  void after(std::chrono::milliseconds delay, std::function<void()> fn, const ExchangeImpl* ex);  // Exchange::after
  bool is_current(const ExchangeImpl* ex) const;
  void respond(Response res);
  void start_stream(Response head);
  bool write_chunk(std::string_view data);
  void end_stream();

 private:
  enum class Phase { Idle, Header, Body, Handling, Lingering, Closed };
  enum class Deadline { None, Idle, Header, Body, Linger };

  void read_some();
  void on_read_some(boost::system::error_code ec, size_t n);
  void read_header();
  void on_header(boost::system::error_code ec);
  void on_body(boost::system::error_code ec);
  void dispatch();
  void refuse(Response res);                 // answer before the body was read, then close
  void fail(int status, const std::string& message);  // transport error, then close
  void send_head(Response& res, Framing framing, size_t body_length);
  void queue_write(std::string bytes);
  void flush();
  void on_write(boost::system::error_code ec);
  void on_drained();
  void finish_exchange();
  void next_request();
  void begin_close();                        // lingering close after the last byte is sent
  void close_now(AbortReason why = AbortReason::ClientGone);
  void abort_exchange(AbortReason why);
  void arm_read_timer(Deadline kind, double seconds);
  void cancel_read_timer();
  void cancel_exchange_timer();
  void run_task(const std::function<void()>& fn);  // a handler's task, its exceptions answered

  std::shared_ptr<ServerCore> core_;
  boost::asio::ip::tcp::socket socket_;
  const boost::asio::any_io_executor executor_;  // the connection's strand
  boost::asio::steady_timer read_timer_;
  boost::asio::steady_timer write_timer_;
  boost::asio::steady_timer exchange_timer_;  // Exchange::after
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  const uint64_t id_;
  std::string remote_addr_;
  int remote_port_ = 0;

  Phase phase_ = Phase::Idle;
  bool reading_ = false;         // a read (read_some or a Beast read) is in flight
  Deadline read_deadline_ = Deadline::None;
  uint64_t read_timer_gen_ = 0;
  bool read_timed_out_ = false;
  uint64_t write_timer_gen_ = 0;
  uint64_t exchange_timer_gen_ = 0;
  bool write_timed_out_ = false;
  size_t linger_bytes_ = 0;

  std::string out_;              // queued bytes
  std::string sending_;          // bytes of the write in flight
  bool writing_ = false;
  bool close_after_ = false;     // close (lingering) once everything is written

  // The request being answered.
  std::shared_ptr<ExchangeImpl> exchange_;
  bool keep_alive_ = true;
  bool head_sent_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool head_only_ = false;       // HEAD: no body bytes
  bool response_complete_ = false;
};

}  // namespace ubatch::server::http

// One request being answered: what an asynchronous route handler holds to respond later,
// possibly from another thread, and to stream a body (Server-Sent Events).
//
// Threads: every connection runs on its own strand of the server's I/O threads. The handler
// is called on that strand; every method below except post() and waker() must be called on
// it too — inside the handler, or inside a function run by post() or a waker. Another thread
// must never drop the last reference to an exchange (it owns sockets of the I/O context):
// a thread that is not an I/O thread wakes the handler through a waker(), which holds no
// strong reference (the engine thread, through sched::Stream's notifier).
//
// Ending: exactly one of respond() or start_stream() … end_stream() answers the request.
// The abort handler (on_abort) runs once, on the strand, when the exchange can no longer be
// answered normally: the client went away (ClientGone), a streamed body outgrew the stream
// buffer (SlowClient; the connection is closed), or the server is shutting down
// (ShuttingDown; the connection is still open and the handler should answer at once — a
// final event for a stream, an error otherwise). After ClientGone and SlowClient every call
// is ignored.
#pragma once

#include <chrono>
#include <functional>
#include <string_view>

#include "server/http/request.h"
#include "server/http/response.h"

namespace ubatch::server::http {

enum class AbortReason { ClientGone, SlowClient, ShuttingDown };
const char* abort_reason_name(AbortReason r);  // "client_gone", "slow_client", "shutting_down"

class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual const Request& request() const = 0;

  // Runs fn on this exchange's strand (never inline). Thread-safe, never blocks. fn is
  // dropped when the server has stopped. The caller keeps a reference to the exchange: use
  // it from threads that outlive no server (tests), else use waker().
  virtual void post(std::function<void()> fn) = 0;

  // A function any thread may call, any number of times, that never blocks: each call runs
  // `task` on this exchange's strand, calls made while one run is pending being merged into
  // it. It holds no strong reference to the exchange or its connection (only weak ones, taken
  // and dropped under the server's stop gate), so it may live on in another thread's data
  // (a stream's notifier); once the connection is gone or the server stopped it does nothing.
  // `task` should hold its own state weakly too.
  virtual std::function<void()> waker(std::function<void()> task) = 0;

  // Runs fn on this exchange's strand once `delay` has passed, replacing a run still pending
  // from an earlier call. Dropped, uncalled, once the exchange is answered or aborted (the
  // timer is cancelled then, so it keeps nothing alive past the exchange) or the server
  // stops. For bodies produced on a clock, such as the dashboard's snapshot stream.
  virtual void after(std::chrono::milliseconds delay, std::function<void()> fn) = 0;

  // Answers with a whole response. Ignored once answered.
  virtual void respond(Response res) = 0;

  // Sends the status and header fields of a streamed response now (HTTP/1.1: chunked
  // transfer coding; HTTP/1.0: the body ends when the connection closes). res.body is ignored.
  virtual void start_stream(Response head) = 0;
  // Queues body bytes of a started stream. Returns false when the bytes were not queued: the
  // connection is gone, or the bytes the socket has not yet taken would exceed the stream
  // buffer limit (the exchange is then aborted with SlowClient before this returns).
  virtual bool write(std::string_view data) = 0;
  // Ends a started stream; the connection serves its next request once the bytes are sent.
  virtual void end_stream() = 0;

  // Installs the abort handler (replacing any). It is dropped, uncalled, once the response
  // has been fully queued, so it may own the handler's state (the cycle ends there).
  virtual void on_abort(std::function<void(AbortReason)> fn) = 0;

  // False once the exchange was aborted (ClientGone, SlowClient) or fully answered.
  virtual bool active() const = 0;
};

}  // namespace ubatch::server::http

#include "server/http/server.h"

#include <sys/socket.h>

#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/http/connection.h"

namespace ubatch::server::http {

namespace net = boost::asio;
using boost::system::error_code;
using tcp = net::ip::tcp;

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(Limits l, CorsPolicy c, Router r, Hooks h)
      : core(std::make_shared<ServerCore>(std::move(l), std::move(c), std::move(r), std::move(h))) {}

  std::shared_ptr<ServerCore> core;
  std::unique_ptr<net::io_context> ioc = std::make_unique<net::io_context>();
  // Declared after the context: destroyed before it.
  std::unique_ptr<net::strand<net::io_context::executor_type>> accept_strand;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<net::steady_timer> accept_retry;
  std::vector<std::thread> threads;
  int port = -1;
  bool started = false;
  bool stopped = false;

  void accept() {
    acceptor->async_accept(net::make_strand(*ioc), [self = shared_from_this()](error_code ec, tcp::socket socket) {
      self->on_accept(ec, std::move(socket));
    });
  }

  void on_accept(error_code ec, tcp::socket socket) {
    if (core->stopping || !acceptor->is_open()) return;
    if (ec) {
      if (ec == net::error::operation_aborted) return;
      // Out of descriptors (EMFILE/ENFILE) or a transient error: pause instead of spinning.
      spdlog::warn("http: accept failed: {}", ec.message());
      accept_retry->expires_after(std::chrono::milliseconds(100));
      accept_retry->async_wait([self = shared_from_this()](error_code e) {
        if (!e && !self->core->stopping) self->accept();
      });
      return;
    }
    core->stats.connections_accepted++;
    if (static_cast<size_t>(std::max<int64_t>(core->stats.connections_open.load(), 0)) >= core->limits.max_connections) {
      core->stats.connections_refused++;
      error_code ignored;
      socket.close(ignored);  // refused: accepted and closed at once
    } else {
      std::shared_ptr<Connection> c;
      {
        std::lock_guard<std::mutex> lock(core->registry_mutex);
        const uint64_t id = core->next_id++;
        c = std::make_shared<Connection>(core, std::move(socket), id);
        core->connections[id] = c;
      }
      net::post(c->executor(), [c] { c->start(); });
    }
    accept();
  }

  // Posts fn(connection) to every open connection's strand.
  template <typename Fn>
  void for_each_connection(Fn fn) {
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard<std::mutex> lock(core->registry_mutex);
      for (auto& [id, weak] : core->connections)
        if (auto c = weak.lock()) live.push_back(std::move(c));
    }
    for (auto& c : live) net::post(c->executor(), [c, fn] { fn(*c); });
  }

  // Waits until no connection is open or `until` passes. True when none is open.
  bool wait_closed(std::chrono::steady_clock::time_point until) {
    std::unique_lock<std::mutex> lock(core->registry_mutex);
    return core->registry_cv.wait_until(lock, until, [&] { return core->connections.empty(); });
  }
};

Server::Server(Limits limits, CorsPolicy cors, Router router, Hooks hooks)
    : impl_(std::make_shared<Impl>(std::move(limits), std::move(cors), std::move(router), std::move(hooks))) {}

Server::~Server() { stop(); }

Result<int> Server::bind(const std::string& host, int port) {
  Impl& m = *impl_;
  if (m.port >= 0) return m.port;
  error_code ec;
  const net::ip::address addr = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return Status::error(fmt::format("serve: cannot listen on {}:{}: '{}' is not an IP address", host, port, host));
  m.accept_strand = std::make_unique<net::strand<net::io_context::executor_type>>(m.ioc->get_executor());
  m.acceptor = std::make_unique<tcp::acceptor>(*m.accept_strand);
  m.accept_retry = std::make_unique<net::steady_timer>(*m.accept_strand);
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  m.acceptor->open(ep.protocol(), ec);
  if (!ec) m.acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) m.acceptor->bind(ep, ec);
  if (!ec) m.acceptor->listen(SOMAXCONN, ec);
  if (ec) {
    m.acceptor.reset();
    return Status::error(fmt::format("serve: cannot listen on {}:{}: {}", host, port, ec.message()));
  }
  m.port = m.acceptor->local_endpoint().port();
  return m.port;
}

Status Server::start() {
  Impl& m = *impl_;
  if (!m.acceptor) return Status::error("serve: start() before bind()");
  if (m.started) return Status::error("serve: already started");
  m.started = true;
  net::post(*m.accept_strand, [self = impl_] { self->accept(); });
  const int n = std::max(1, m.core->limits.io_threads);
  for (int i = 0; i < n; ++i)
    m.threads.emplace_back([ioc = m.ioc.get()] {
      for (;;) {
        try {
          ioc->run();
          return;
        } catch (const std::exception& e) {  // a handler let an exception out: log, keep serving
          spdlog::error("http: I/O thread: {}", e.what());
        }
      }
    });
  return Status::ok();
}

void Server::drain() {
  Impl& m = *impl_;
  if (m.core->draining.exchange(true) || !m.started) return;
  m.for_each_connection([](Connection& c) { c.on_drain(); });
}

void Server::stop(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  if (m.stopped) return;
  m.stopped = true;
  m.core->stopping = true;
  if (m.started) {
    net::post(*m.accept_strand, [self = impl_] {
      error_code ignored;
      if (self->acceptor) self->acceptor->close(ignored);
      self->accept_retry->cancel();
    });
    m.for_each_connection([](Connection& c) { c.on_stop(); });
    const auto t0 = std::chrono::steady_clock::now();
    if (!m.wait_closed(t0 + grace)) {
      m.for_each_connection([](Connection& c) { c.force_close(); });
      m.wait_closed(std::chrono::steady_clock::now() + std::chrono::seconds(1));
    }
  }
  {
    std::lock_guard<std::mutex> lock(m.core->gate_mutex);
    m.core->gate_open = false;
  }
  m.ioc->stop();
  for (std::thread& t : m.threads) t.join();
  m.threads.clear();
  // Drop every pending handler (and the connections they hold) before the context goes.
  m.accept_retry.reset();
  m.acceptor.reset();
  m.accept_strand.reset();  // a strand must not outlive its context's services
  m.ioc.reset();
}

int Server::port() const { return impl_->port; }
const TransportStats& Server::stats() const { return impl_->core->stats; }
const Limits& Server::limits() const { return impl_->core->limits; }

}  // namespace ubatch::server::http

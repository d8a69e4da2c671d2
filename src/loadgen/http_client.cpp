#include "loadgen/http_client.h"

#include <openssl/ssl.h>

#include <chrono>
#include <limits>
#include <optional>
#include <regex>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <fmt/format.h>

namespace ubatch::loadgen {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;
using tcp = net::ip::tcp;

Status parse_base_url(const std::string& url, HttpClientOptions& o) {
  static const std::regex url_re(R"(^(https?)://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:([0-9]{1,5}))?/?$)");
  std::smatch m;
  if (!std::regex_match(url, m, url_re))
    return Status::error(fmt::format("expected http://HOST[:PORT] or https://HOST[:PORT], got '{}'", url));
  o.scheme = m[1];
  o.host = m[2];
  if (o.host.size() > 2 && o.host.front() == '[') o.host = o.host.substr(1, o.host.size() - 2);
  o.port = m[4].matched ? std::stoi(m[4]) : (o.scheme == "https" ? 443 : 80);
  if (o.port <= 0 || o.port > 65535) return Status::error(fmt::format("port out of range in '{}'", url));
  return Status::ok();
}

const char* http_failure_name(HttpFailure f) {
  switch (f) {
    case HttpFailure::None: return "";
    case HttpFailure::Connect: return "connect";
    case HttpFailure::Write: return "write";
    case HttpFailure::Read: return "read";
    case HttpFailure::Timeout: return "timeout";
    case HttpFailure::Tls: return "tls";
    case HttpFailure::Protocol: return "protocol";
  }
  return "client";
}

namespace {
std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

struct HttpClient::Impl {
  explicit Impl(HttpClientOptions o) : opt(std::move(o)) {}

  HttpClientOptions opt;
  net::io_context ioc;
  std::optional<ssl::context> tls_ctx;
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  bool carried_response = false;  // the open connection has carried a whole response

  bool https() const { return opt.scheme == "https"; }
  beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  bool is_open() { return (plain || tls) && lowest().socket().is_open(); }

  // Runs the I/O context until the operation started by `start` completes.
  template <typename Start>
  error_code run(Start start) {
    error_code result = net::error::would_block;
    start([&result](error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }

  void reset() {
    if (plain || tls) {
      error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
      lowest().close();
    }
    tls.reset();
    plain.reset();
    buffer.consume(buffer.size());
    carried_response = false;
  }

  Outcome connect() {
    Outcome out;
    reset();
    tcp::resolver resolver(ioc);
    tcp::resolver::results_type endpoints;
    error_code ec = run([&](auto handler) {
      resolver.async_resolve(opt.host, std::to_string(opt.port),
                             [&endpoints, handler](error_code e, tcp::resolver::results_type r) mutable {
                               endpoints = std::move(r);
                               handler(e);
                             });
    });
    if (ec) {
      out.failure = HttpFailure::Connect;
      out.message = fmt::format("cannot resolve {}: {}", opt.host, ec.message());
      return out;
    }
    if (https()) {
      if (!tls_ctx) {
        tls_ctx.emplace(ssl::context::tls_client);
        tls_ctx->set_default_verify_paths();
        tls_ctx->set_verify_mode(ssl::verify_peer);
      }
      tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc, *tls_ctx);
    } else {
      plain = std::make_unique<beast::tcp_stream>(ioc);
    }
    lowest().expires_after(seconds(opt.connect_timeout_s));
    ec = run([&](auto handler) {
      lowest().async_connect(endpoints, [handler](error_code e, const tcp::endpoint&) mutable { handler(e); });
    });
    if (ec) {
      out.failure = ec == beast::error::timeout ? HttpFailure::Timeout : HttpFailure::Connect;
      out.message = fmt::format("cannot connect to {}:{}: {}", opt.host, opt.port, ec.message());
      reset();
      return out;
    }
    error_code ignored;
    lowest().socket().set_option(tcp::no_delay(true), ignored);
    if (tls) {
      // SNI, and the certificate must name the host.
      if (!SSL_set_tlsext_host_name(tls->native_handle(), opt.host.c_str())) {
        out.failure = HttpFailure::Tls;
        out.message = "cannot set the TLS server name";
        reset();
        return out;
      }
      tls->set_verify_callback(ssl::host_name_verification(opt.host));
      lowest().expires_after(seconds(opt.connect_timeout_s));
      ec = run([&](auto handler) { tls->async_handshake(ssl::stream_base::client, handler); });
      if (ec) {
        out.failure = HttpFailure::Tls;
        out.message = fmt::format("TLS handshake with {} failed: {}", opt.host, ec.message());
        reset();
        return out;
      }
    }
    return out;
  }

  template <typename Stream>
  Outcome exchange(Stream& stream, const std::string& wire, const std::string& method, HttpReply& reply,
                   const std::function<void(const HttpReply&)>& on_head,
                   const std::function<bool(std::string_view)>& on_body) {
    Outcome out;
    lowest().expires_after(seconds(opt.io_timeout_s));
    error_code ec = run([&](auto handler) {
      net::async_write(stream, net::buffer(wire), [handler](error_code e, size_t) mutable { handler(e); });
    });
    if (ec) {
      out.failure = ec == beast::error::timeout ? HttpFailure::Timeout : HttpFailure::Write;
      out.message = "write failed: " + ec.message();
      return out;
    }
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // not boost::none (Boost 1.74 bug)
    parser.header_limit(64 << 10);
    if (method == "HEAD") parser.skip(true);
    auto fail_read = [&](error_code e) {
      out.failure = e == beast::error::timeout ? HttpFailure::Timeout
                    : (e == bhttp::error::end_of_stream || e == net::error::eof || e == net::error::connection_reset ||
                       e == bhttp::error::partial_message || e == net::ssl::error::stream_truncated)
                        ? HttpFailure::Read
                        : HttpFailure::Protocol;
      out.message = "read failed: " + e.message();
      return out;
    };
    lowest().expires_after(seconds(opt.io_timeout_s));
    ec = run([&](auto handler) {
      bhttp::async_read_header(stream, buffer, parser, [handler](error_code e, size_t) mutable { handler(e); });
    });
    if (buffer.size() > 0 || !ec) out.any_bytes = true;
    if (ec) return fail_read(ec);
    out.any_bytes = true;
    reply.status = static_cast<int>(parser.get().result_int());
    for (const auto& f : parser.get()) reply.headers.emplace(std::string(f.name_string()), std::string(f.value()));
    if (on_head) on_head(reply);
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      lowest().expires_after(seconds(opt.io_timeout_s));
      ec = run([&](auto handler) {
        bhttp::async_read_some(stream, buffer, parser, [handler](error_code e, size_t) mutable { handler(e); });
      });
      if (ec == bhttp::error::need_buffer) ec = {};
      const size_t n = sizeof(chunk) - parser.get().body().size;
      if (n > 0) {
        if (!on_body) {
          reply.body.append(chunk, n);
        } else if (!on_body(std::string_view(chunk, n))) {
          reset();  // the rest of the body is unread: the connection cannot carry another request
          out.stopped = true;
          return out;
        }
      }
      if (ec) return fail_read(ec);
    }
    if (!parser.keep_alive())
      reset();
    else
      carried_response = true;
    return out;
  }
};

HttpClient::HttpClient(HttpClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpClient::~HttpClient() { close(); }

void HttpClient::close() { impl_->reset(); }
bool HttpClient::connected() const { return impl_->is_open(); }

HttpClient::Outcome HttpClient::request(const std::string& method, const std::string& target,
                                        const HttpHeaders& fields, const std::string& body, HttpReply& reply,
                                        const std::function<void(const HttpReply&)>& on_head,
                                        const std::function<bool(std::string_view)>& on_body) {
  reply = HttpReply();
  Impl& m = *impl_;
  try {
    Outcome out;
    const bool reused = m.is_open() && m.carried_response;
    if (!m.is_open()) {
      out = m.connect();
      if (!out.ok()) return out;
    }
    std::string wire = fmt::format("{} {} HTTP/1.1\r\n", method, target);
    const bool v6 = m.opt.host.find(':') != std::string::npos;
    const bool default_port = m.opt.port == (m.https() ? 443 : 80);
    wire += fmt::format("Host: {}{}{}{}\r\n", v6 ? "[" : "", m.opt.host, v6 ? "]" : "",
                        default_port ? std::string() : fmt::format(":{}", m.opt.port));
    bool has_length = false;
    for (const auto& [name, value] : fields) {
      if (iequals(name, "Host")) continue;
      has_length |= iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding");
      wire += name + ": " + value + "\r\n";
    }
    if (!has_length && (!body.empty() || method == "POST" || method == "PUT"))
      wire += fmt::format("Content-Length: {}\r\n", body.size());
    wire += "\r\n";
    wire += body;
    m.carried_response = false;
    out = m.tls ? m.exchange(*m.tls, wire, method, reply, on_head, on_body)
                : m.exchange(*m.plain, wire, method, reply, on_head, on_body);
    out.reused = reused;
    if (!out.ok()) m.reset();
    return out;
  } catch (const std::exception& e) {
    m.reset();
    Outcome out;
    out.failure = HttpFailure::Protocol;
    out.message = e.what();
    return out;
  }
}

}  // namespace ubatch::loadgen

// The web page for people (docs/API.md, "Web page"): GET / serves the page, GET /webui/<file>
// its scripts, styles and icon (all compiled in from web/), and GET /v1/dashboard/events the
// live scheduler dashboard as Server-Sent Events (server/dashboard.h builds the snapshots).
// `--no-webui` leaves all of them unregistered (404).
//
// Auth (with --api-key): the page's files hold no data and are served without the key — a
// browser cannot attach one to a navigation; the page asks for the key once, keeps it in the
// browser's localStorage, and sends it as "Authorization: Bearer" on every API call, the event
// stream included (read with fetch(), since an EventSource cannot send headers).
//
// The event stream holds no thread: a timer on the connection's strand (http::Exchange::after)
// builds and queues one snapshot per interval. It ends when the client goes away, when its
// bytes outgrow the stream buffer (a client that stopped reading, --stream-buffer), when the
// server begins to drain (HttpServer::drain) and when it stops.
#pragma once

#include <string_view>

#include "server/http/router.h"
#include "server/server_state.h"

namespace ubatch::server {

// The paths served without the API key when the web page is on: "/" and "/webui/...".
bool is_webui_public_path(std::string_view path);

// Most dashboard event streams open at once; more get 503. Each costs a snapshot build on an
// I/O thread per interval (docs/BENCHMARKS.md, "Dashboard").
inline constexpr int kMaxDashboardStreams = 16;

void register_webui_routes(http::Router& router, ServerState& state);

}  // namespace ubatch::server

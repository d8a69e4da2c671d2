// Tells whether the client of a request still holds its connection, for non-streaming
// requests that wait on the engine without writing anything (cpp-httplib 0.11 has no
// Request::is_connection_closed()). The socket is found once by its address pair
// (request local and remote address and port, matched with getsockname/getpeername over
// /proc/self/fd); the handler's thread owns that socket until the handler returns, so the
// descriptor stays valid while the probe is used. Linux only; where the socket cannot be
// found the probe never reports a closed connection.
#pragma once

#include <string>

namespace ubatch::server {

class ConnectionProbe {
 public:
  ConnectionProbe(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  // True once the peer closed or reset the connection (POLLRDHUP, POLLHUP, POLLERR, or a
  // zero-byte peek). Pending pipelined bytes count as open. Never blocks.
  bool closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace ubatch::server

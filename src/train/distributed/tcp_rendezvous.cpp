// The TCP rendezvous (see tcp_rendezvous.h): POSIX sockets, poll() for every wait so each
// step honours the deadline, MSG_NOSIGNAL so a vanished peer is an error and not SIGPIPE.
#include "microllm/train/distributed/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include "microllm/core/error.h"

namespace microllm::train {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[8] = {'M', 'L', 'L', 'M', 'R', 'D', 'V', '1'};
constexpr uint32_t kMaxBlob = 1 << 16;
constexpr uint32_t kStatusOk = 0, kStatusRefused = 1;

std::string errno_text(int err) { return std::strerror(err); }

// Milliseconds left until `deadline` (0 when passed), capped so poll() never overflows.
int ms_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int fd() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Waits for `events` on fd until the deadline: true when ready, false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Sends all bytes before the deadline; the error text on failure ("" on success).
std::string send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_for(fd, POLLOUT, deadline)) return "timed out sending";
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return "send: " + errno_text(errno);
    }
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return "";
}

// Receives exactly n bytes before the deadline; the error text on failure ("" on success).
std::string recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_for(fd, POLLIN, deadline)) return "timed out waiting for data";
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got == 0) return "the peer closed the connection";
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return "recv: " + errno_text(errno);
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return "";
}

void put_u32(char* out, uint32_t v) {
  const uint32_t be = htonl(v);
  std::memcpy(out, &be, 4);
}
uint32_t get_u32(const char* in) {
  uint32_t be = 0;
  std::memcpy(&be, in, 4);
  return ntohl(be);
}

// Rank 0's reply: magic | status | length | bytes.
std::string send_reply(int fd, uint32_t status, const void* data, size_t n,
                       Clock::time_point deadline) {
  char header[16];
  std::memcpy(header, kMagic, 8);
  put_u32(header + 8, status);
  put_u32(header + 12, static_cast<uint32_t>(n));
  std::string error = send_all(fd, header, sizeof header, deadline);
  if (error.empty() && n > 0) error = send_all(fd, data, n, deadline);
  return error;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

// Connects to one resolved address before the deadline; "" on success, else the error text.
std::string connect_one(const addrinfo& ai, Socket& out, Clock::time_point deadline) {
  Socket s(::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol));
  if (s.fd() < 0) return "socket: " + errno_text(errno);
  set_nonblocking(s.fd());
  if (::connect(s.fd(), ai.ai_addr, ai.ai_addrlen) < 0) {
    if (errno != EINPROGRESS) return "connect: " + errno_text(errno);
    if (!wait_for(s.fd(), POLLOUT, deadline)) return "connect: timed out";
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return "connect: " + errno_text(err);
  }
  out = std::move(s);
  return "";
}

}  // namespace

RendezvousServer::RendezvousServer(int port, int world_size) : world_size_(world_size) {
  MICROLLM_CHECK(port >= 0 && port <= 65535, "rendezvous", "port ", port, " is outside [0, 65535]");
  MICROLLM_CHECK(world_size >= 1, "rendezvous", "world size must be ≥ 1, found ", world_size);
  // IPv6 dual stack accepts IPv4 peers too; hosts without IPv6 fall back to IPv4.
  Socket s(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int bind_error = 0;
  if (s.fd() >= 0) {
    const int off = 0, on = 1;
    ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
      bind_error = errno;
      s.reset();
    }
  }
  if (s.fd() < 0 && bind_error != EADDRINUSE) {
    s = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    MICROLLM_CHECK(s.fd() >= 0, "rendezvous", "socket: ", errno_text(errno));
    const int on = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bind_error = ::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 ? errno : 0;
  }
  MICROLLM_CHECK(
      bind_error == 0, "rendezvous", "rank 0 cannot listen on port ", port, ": ",
      errno_text(bind_error),
      bind_error == EADDRINUSE ? " (another run on this MASTER_PORT? pick another port)" : "");
  MICROLLM_CHECK(::listen(s.fd(), 128) == 0, "rendezvous", "listen on port ", port, ": ",
                 errno_text(errno));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  set_nonblocking(s.fd());
  fd_ = s.release();
}

RendezvousServer::~RendezvousServer() {
  if (fd_ >= 0) ::close(fd_);
}

void RendezvousServer::serve(const std::vector<uint8_t>& blob, double timeout_seconds) {
  MICROLLM_CHECK(blob.size() <= kMaxBlob, "rendezvous", "blob of ", blob.size(), " bytes exceeds ",
                 kMaxBlob);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  std::set<int> served;
  while (static_cast<int>(served.size()) < world_size_ - 1) {
    if (!wait_for(fd_, POLLIN, deadline)) {
      std::string missing;
      for (int r = 1; r < world_size_; ++r)
        if (!served.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      MICROLLM_FAIL("rendezvous", "rank 0 on port ", port_, ": rank(s) ", missing,
                    " did not connect within ", timeout_seconds, " s (", served.size(), " of ",
                    world_size_ - 1, " did)");
    }
    Socket conn(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (conn.fd() < 0) continue;  // EAGAIN, EINTR, ECONNABORTED: wait again
    // A peer gets at most 10 s to say hello, so one silent connection cannot stall the run.
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    char hello[16];
    if (!recv_all(conn.fd(), hello, sizeof hello, hello_deadline).empty() ||
        std::memcmp(hello, kMagic, 8) != 0)
      continue;  // not a microllm rank: ignore it
    const uint32_t rank = get_u32(hello + 8), world = get_u32(hello + 12);
    std::string refusal;
    if (world != static_cast<uint32_t>(world_size_))
      refusal = "rank " + std::to_string(rank) + " runs with world size " + std::to_string(world) +
                ", rank 0 with " + std::to_string(world_size_);
    else if (rank < 1 || rank >= world)
      refusal = "a process connected as rank " + std::to_string(rank) + ", outside 1.." +
                std::to_string(world_size_ - 1);
    if (!refusal.empty()) {
      send_reply(conn.fd(), kStatusRefused, refusal.data(), refusal.size(), hello_deadline);
      MICROLLM_FAIL("rendezvous", "rank 0: ", refusal);
    }
    // A rank that connects again (a retry) simply gets the blob again.
    if (send_reply(conn.fd(), kStatusOk, blob.data(), blob.size(), hello_deadline).empty())
      served.insert(static_cast<int>(rank));
  }
}

std::vector<uint8_t> fetch_rendezvous_blob(const std::string& host, int port, int rank,
                                           int world_size, double timeout_seconds) {
  MICROLLM_CHECK(rank >= 1 && rank < world_size, "rendezvous", "rank ", rank,
                 " fetches from rank 0 of ", world_size, " ranks; expected 1..", world_size - 1);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  const std::string where = host + ":" + std::to_string(port);
  std::string last_error = "no attempt";
  while (Clock::now() < deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    Socket s;
    if (gai != 0) {
      last_error = std::string("cannot resolve ") + host + ": " + ::gai_strerror(gai);
    } else {
      for (addrinfo* ai = found; ai && s.fd() < 0; ai = ai->ai_next) {
        const std::string error = connect_one(*ai, s, deadline);
        if (!error.empty()) last_error = error;
      }
      ::freeaddrinfo(found);
    }
    if (s.fd() >= 0) {
      char hello[16];
      std::memcpy(hello, kMagic, 8);
      put_u32(hello + 8, static_cast<uint32_t>(rank));
      put_u32(hello + 12, static_cast<uint32_t>(world_size));
      char header[16];
      std::string error = send_all(s.fd(), hello, sizeof hello, deadline);
      if (error.empty()) error = recv_all(s.fd(), header, sizeof header, deadline);
      if (error.empty()) {
        MICROLLM_CHECK(std::memcmp(header, kMagic, 8) == 0, "rendezvous", "rank ", rank, ": ",
                       where, " is not a microllm rendezvous (unexpected reply)");
        const uint32_t status = get_u32(header + 8), length = get_u32(header + 12);
        MICROLLM_CHECK(length <= kMaxBlob, "rendezvous", "rank ", rank, ": reply of ", length,
                       " bytes from ", where);
        std::vector<uint8_t> body(length);
        error = recv_all(s.fd(), body.data(), body.size(), deadline);
        if (error.empty()) {
          MICROLLM_CHECK(status == kStatusOk, "rendezvous", "rank ", rank, ": rank 0 at ", where,
                         " refused: ", std::string(body.begin(), body.end()));
          return body;
        }
      }
      last_error = error;
    }
    // Rank 0 may not listen yet: try again shortly.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(200, ms_left(deadline))));
  }
  MICROLLM_FAIL("rendezvous", "rank ", rank, " could not get the rendezvous from rank 0 at ", where,
                " within ", timeout_seconds, " s (last error: ", last_error,
                "); is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?");
}

std::vector<uint8_t> exchange_rendezvous_blob(const DistributedEnv& env,
                                              const std::vector<uint8_t>& blob,
                                              double timeout_seconds) {
  if (env.world_size == 1) return blob;
  if (env.rank == 0) {
    RendezvousServer server(env.master_port, env.world_size);
    server.serve(blob, timeout_seconds);
    return blob;
  }
  return fetch_rendezvous_blob(env.master_addr, env.master_port, env.rank, env.world_size,
                               timeout_seconds);
}

}  // namespace microllm::train

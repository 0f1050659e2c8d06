// For the tests of emulated networks (netem_test, latency_test, sites_test): a
// child process inside an endpoint's namespace, and a TCP connection between two
// endpoints on which to time round trips and transfers. Test-only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace weft::netem::testing {

// The exit status of child `pid` (128 + the signal that killed it).
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs `body` in a child process inside network namespace `netns`; the child exits
// with what `body` returns (100 if it could not enter). The test process is
// single-threaded, so the child may do anything.
inline pid_t fork_in(const std::string& netns, const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 100;
  const int fd = ::open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0) code = body();
  ::_exit(code);
}

// One connection accepted on `port` (TCP_NODELAY), or -1.
inline int accept_one(int port) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in any{.sin_family = AF_INET, .sin_port = htons(static_cast<std::uint16_t>(port)), .sin_addr = {INADDR_ANY}};
  if (::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) return -1;
  if (::listen(listener, 1) != 0) return -1;
  const int conn = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  ::setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return conn;
}

// A connection to `address`:`port` (TCP_NODELAY), retried for 5 s while nobody listens; or -1.
inline int connect_to(const std::string& address, int port) {
  sockaddr_in peer{.sin_family = AF_INET, .sin_port = htons(static_cast<std::uint16_t>(port)), .sin_addr = {}};
  ::inet_pton(AF_INET, address.c_str(), &peer.sin_addr);
  for (int attempt = 0; attempt < 500; ++attempt) {
    const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(sock, reinterpret_cast<sockaddr*>(&peer), sizeof peer) == 0) {
      const int on = 1;
      ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      return sock;
    }
    ::close(sock);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

inline bool read_all(int fd, char* data, long long bytes) {
  for (long long got = 0; got < bytes;) {
    const ssize_t n = ::read(fd, data + got, static_cast<std::size_t>(bytes - got));
    if (n <= 0) return false;
    got += n;
  }
  return true;
}

inline bool write_all(int fd, const char* data, long long bytes) {
  for (long long sent = 0; sent < bytes;) {
    const ssize_t n = ::send(fd, data + sent, static_cast<std::size_t>(bytes - sent), MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += n;
  }
  return true;
}

}  // namespace weft::netem::testing

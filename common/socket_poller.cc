#include "common/socket_poller.h"

#include <cerrno>

namespace relaxps {

size_t SocketPoller::AddSocket(zmq::socket_t* socket) {
  items_.push_back(Item{socket, true, false});
  fds_.push_back(pollfd{socket->get(zmq::sockopt::fd), POLLIN, 0});
  return items_.size() - 1;
}

size_t SocketPoller::AddFd(int fd) {
  items_.push_back(Item{nullptr, false, false});
  fds_.push_back(pollfd{fd, POLLIN, 0});
  return items_.size() - 1;
}

void SocketPoller::Clear() {
  items_.clear();
  fds_.clear();
}

bool SocketPoller::HasInput(zmq::socket_t* socket) {
  // Processes the socket's pending commands, which also re-arms its ZMQ_FD.
  return (socket->get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
}

bool SocketPoller::Wait(int timeout_ms) {
  bool any = false;
  for (Item& item : items_) {
    item.readable = false;
    if (item.socket == nullptr || !item.touched) continue;
    item.touched = false;
    item.readable = HasInput(item.socket);
    any = any || item.readable;
  }
  // Plain descriptors are looked at even when a socket has input, so that a
  // busy socket cannot hide them.
  const int n = poll(fds_.data(), fds_.size(), any ? 0 : timeout_ms);
  if (n < 0) {
    if (errno != EINTR) throw zmq::error_t();
    return any;
  }
  for (size_t i = 0; n > 0 && i < items_.size(); ++i) {
    if (fds_[i].revents == 0) continue;
    Item& item = items_[i];
    item.readable = item.readable || item.socket == nullptr || HasInput(item.socket);
    any = any || item.readable;
  }
  return any;
}

}  // namespace relaxps

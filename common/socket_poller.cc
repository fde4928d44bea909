#include "common/socket_poller.h"

#include <cerrno>

namespace relaxps {

size_t SocketPoller::AddSocket(zmq::socket_t* socket) {
  const int fd = socket->get(zmq::sockopt::fd);
  items_.push_back(Item{socket, true, false, fd});
  fds_.push_back(pollfd{fd, POLLIN, 0});
  return items_.size() - 1;
}

size_t SocketPoller::AddFd(int fd) {
  items_.push_back(Item{nullptr, false, false, fd});
  fds_.push_back(pollfd{fd, POLLIN, 0});
  return items_.size() - 1;
}

void SocketPoller::Disable(size_t index) {
  fds_[index].fd = -1;  // poll() skips negative descriptors.
  fds_[index].revents = 0;
  items_[index].readable = false;
}

void SocketPoller::Enable(size_t index) {
  fds_[index].fd = items_[index].fd;
  items_[index].touched = true;
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
  const bool ready = CheckTouched();
  // Plain descriptors are looked at even when a socket has input, so that a
  // busy socket cannot hide them.
  Sleep(ready ? 0 : timeout_ms);
  return CheckFired();
}

bool SocketPoller::CheckTouched() {
  bool any = false;
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& item = items_[i];
    fds_[i].revents = 0;
    item.readable = false;
    if (item.socket == nullptr || !item.touched || fds_[i].fd < 0) continue;
    item.touched = false;
    item.readable = HasInput(item.socket);
    any = any || item.readable;
  }
  return any;
}

void SocketPoller::Sleep(int timeout_ms) {
  if (poll(fds_.data(), fds_.size(), timeout_ms) < 0) {
    for (pollfd& fd : fds_) fd.revents = 0;
    if (errno != EINTR) throw zmq::error_t();
  }
}

bool SocketPoller::CheckFired() {
  bool any = false;
  for (size_t i = 0; i < items_.size(); ++i) {
    Item& item = items_[i];
    const bool fired = fds_[i].revents != 0;
    fds_[i].revents = 0;
    if (fds_[i].fd < 0) continue;  // Disabled: not ours to ask.
    if (!item.readable && (fired || item.touched)) {
      item.readable = item.socket == nullptr || HasInput(item.socket);
    }
    item.touched = false;
    any = any || item.readable;
  }
  return any;
}

}  // namespace relaxps

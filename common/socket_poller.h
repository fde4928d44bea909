// SocketPoller: waits until ZeroMQ sockets or plain file descriptors have
// input, at a cost that does not grow with the sockets that stay idle.
//
// zmq_poll() asks every socket for ZMQ_EVENTS twice per call (once before it
// sleeps, once after), and libzmq answers each ask of an idle socket with a
// poll() and a getpid() system call: an RpcClient with five sockets (a
// server, the coordinator, their disconnect monitors) paid about twenty
// system calls per wait, that is per request. SocketPoller sleeps in one
// poll() on the sockets' ZMQ_FD descriptors and asks ZMQ_EVENTS only of a
// socket whose descriptor fired or that the caller touched.
//
// Touch() is part of the contract: ZMQ_FD fires when commands reach a socket,
// and any send or receive on the socket may process those commands itself,
// so a socket the caller sent on (or stopped reading before it ran dry) can
// hold input that its descriptor will never announce. A socket read until it
// returned EAGAIN needs no touch: that receive left no command unprocessed.
//
// Thread-safety: a SocketPoller and its sockets belong to one thread.
#ifndef RELAXPS_COMMON_SOCKET_POLLER_H_
#define RELAXPS_COMMON_SOCKET_POLLER_H_

#include <poll.h>

#include <cstddef>
#include <vector>

#include <zmq.hpp>

namespace relaxps {

class SocketPoller {
 public:
  SocketPoller() = default;
  SocketPoller(const SocketPoller&) = delete;
  SocketPoller& operator=(const SocketPoller&) = delete;

  // Adds an item polled for input; returns its index (items are numbered in
  // the order added). REQUIRES: the socket (or descriptor) stays open while
  // it is polled. A new socket starts touched.
  size_t AddSocket(zmq::socket_t* socket);
  size_t AddFd(int fd);
  // Removes every item.
  void Clear();
  size_t size() const { return items_.size(); }

  // Asks the socket at `index` for ZMQ_EVENTS at the next Wait() even if its
  // descriptor stays quiet. Call it after sending on the socket and after
  // leaving input unread.
  void Touch(size_t index) { items_[index].touched = true; }

  // Leaves the item out of the waits and the checks (no poll() on its
  // descriptor, no ZeroMQ call on its socket) while another thread reads it;
  // Enable() takes it back, touched, since that thread's calls may have
  // processed the commands that its descriptor announced.
  void Disable(size_t index);
  void Enable(size_t index);

  // Waits up to timeout_ms (< 0: without limit; 0: not at all) for input on
  // any item; returns whether some item has it (see readable()). A touched
  // socket with input ends the wait at once. An interrupted wait returns
  // what it found. Throws zmq::error_t as zmq_poll does (a closed context).
  // The same as CheckTouched(), Sleep() unless that found input, CheckFired().
  bool Wait(int timeout_ms);
  // Whether the item had input at the last check.
  bool readable(size_t index) const { return items_[index].readable; }

  // Wait() in three steps, for a thread that shares its sockets with others
  // under a lock: only Sleep() leaves the sockets alone, so only it may run
  // without the lock.
  // Forgets what the last wait found and asks the touched sockets; returns
  // whether one has input.
  bool CheckTouched();
  // poll() on the descriptors; no ZeroMQ call.
  void Sleep(int timeout_ms);
  // Asks the sockets whose descriptors fired in Sleep(), and those touched
  // since CheckTouched(); returns whether any item has input.
  bool CheckFired();

 private:
  struct Item {
    zmq::socket_t* socket;  // nullptr: a plain descriptor.
    bool touched;
    bool readable;
    int fd;  // fds_[i].fd is -1 while the item is disabled.
  };
  static bool HasInput(zmq::socket_t* socket);

  std::vector<Item> items_;
  std::vector<pollfd> fds_;  // Parallel to items_.
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_SOCKET_POLLER_H_

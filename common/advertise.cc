#include "common/advertise.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

namespace relaxps {
namespace {

// "tcp://HOST:PORT" -> (HOST, PORT); false if not of that form.
bool SplitTcp(const std::string& endpoint, std::string* host, std::string* port) {
  const std::string tcp = "tcp://";
  if (endpoint.rfind(tcp, 0) != 0) return false;
  const std::string rest = endpoint.substr(tcp.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) return false;
  *host = rest.substr(0, colon);
  *port = rest.substr(colon + 1);
  return true;
}

}  // namespace

StatusOr<std::string> AdvertisedEndpoint(const std::string& bound, const std::string& advertise) {
  std::string host;
  std::string port;
  const bool tcp = SplitTcp(bound, &host, &port);
  if (advertise.empty()) {
    if (tcp && (host == "0.0.0.0" || host == "[::]" || host == "*")) {
      return InvalidArgumentError("bound " + bound +
                                  " on every interface: pass --advertise=HOST, the address "
                                  "other hosts reach this one at");
    }
    return bound;
  }
  if (advertise.find_first_of(" \t\n/") != std::string::npos &&
      advertise.rfind("tcp://", 0) != 0) {
    return InvalidArgumentError("--advertise=" + advertise + " is not HOST, HOST:PORT or tcp://HOST:PORT");
  }
  std::string a_host;
  std::string a_port;
  if (SplitTcp(advertise, &a_host, &a_port)) return advertise;
  if (advertise.rfind("tcp://", 0) == 0) {
    return InvalidArgumentError("--advertise=" + advertise + " has no port");
  }
  // "HOST:PORT" (a bracketed IPv6 host keeps its colons inside brackets).
  const size_t close = advertise.rfind(']');
  const size_t colon = advertise.rfind(':');
  const bool has_port = colon != std::string::npos &&
                        (close == std::string::npos ? advertise.find(':') == colon : colon > close);
  if (has_port) return "tcp://" + advertise;
  if (advertise.find(':') != std::string::npos && advertise.front() != '[') {
    return InvalidArgumentError("--advertise=" + advertise + ": bracket an IPv6 address, [::1]");
  }
  if (!tcp) {
    return InvalidArgumentError("--advertise=" + advertise + " needs a tcp:// bind, not " + bound);
  }
  return "tcp://" + advertise + ":" + port;
}

Status CheckHostResolves(const std::string& endpoint) {
  std::string host;
  std::string port;
  if (!SplitTcp(endpoint, &host, &port)) return Status::OK();
  if (host == "*" || host.front() == '[') return Status::OK();  // Wildcard, IPv6 address.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc == 0) return Status::OK();
  return InvalidArgumentError("cannot resolve host '" + host + "' of endpoint " + endpoint +
                              ": " + ::gai_strerror(rc) +
                              " (use an address, or a name this machine resolves)");
}

Status CheckSourceAddress(const std::string& address) {
  if (address.empty()) return Status::OK();
  sockaddr_storage storage{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    length = sizeof(*v4);
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    length = sizeof(*v6);
  } else {
    return InvalidArgumentError("source address '" + address +
                                "' is not a numeric IPv4 or IPv6 address");
  }
  const int fd = ::socket(storage.ss_family, SOCK_DGRAM, 0);
  if (fd < 0) return Status::OK();  // Cannot tell; connections will say.
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&storage), length) == 0;
  const int error = errno;
  ::close(fd);
  if (bound || error != EADDRNOTAVAIL) return Status::OK();
  return InvalidArgumentError("source address " + address + " is not an address of this host");
}

}  // namespace relaxps

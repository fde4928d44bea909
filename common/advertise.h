// The endpoint a process registers with the coordinator or hands to peers,
// as opposed to the one it bound: a process bound on every interface
// (tcp://0.0.0.0:PORT) must tell others an address they can reach.
//
// Thread-safety: pure functions.
#ifndef RELAXPS_COMMON_ADVERTISE_H_
#define RELAXPS_COMMON_ADVERTISE_H_

#include <string>

#include "common/status.h"

namespace relaxps {

// The endpoint to advertise for a socket bound at `bound` (ZeroMQ's
// last_endpoint, with the real port):
//   advertise ""                 -> `bound`, unless it is a wildcard address
//                                   (0.0.0.0, ::): InvalidArgument asking
//                                   for --advertise;
//   advertise "HOST"             -> tcp://HOST:<bound port>;
//   advertise "HOST:PORT" or
//   "tcp://HOST:PORT"            -> tcp://HOST:PORT (a port forwarded to it).
// HOST may be a name, an IPv4 address or a bracketed IPv6 address.
StatusOr<std::string> AdvertisedEndpoint(const std::string& bound, const std::string& advertise);

// For "tcp://HOST:PORT" with a host name (not an address, not a wildcard):
// InvalidArgument at once, naming the host and the endpoint, if the name does
// not resolve (getaddrinfo), rather than the DeadlineExceeded a connection to
// it ends in much later. Other endpoints (ipc://, addresses) are OK as they
// are. "localhost" resolves through /etc/hosts like any name.
Status CheckHostResolves(const std::string& endpoint);

// A source address for outgoing connections (RpcClientOptions::
// source_address): OK when empty or a numeric IPv4 / IPv6 address that this
// host has (a socket can bind it); otherwise InvalidArgument naming it,
// rather than connections that retry forever without a word.
Status CheckSourceAddress(const std::string& address);

}  // namespace relaxps

#endif  // RELAXPS_COMMON_ADVERTISE_H_

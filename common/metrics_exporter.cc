#include "common/metrics_exporter.h"

#include <sys/socket.h>

#include <thread>

#include <httplib.h>

namespace relaxps {
namespace metrics {
namespace {

class HttpExporter final : public MetricsExporter {
 public:
  HttpExporter(const Registry* registry) : registry_(registry) {
    // One thread serves scrapes: Prometheus scrapes rarely, and a scrape
    // must not compete with the process's own threads.
    http_.new_task_queue = [] { return new httplib::ThreadPool(1); };
    // httplib's default also sets SO_REUSEPORT, which would let two
    // processes share a port: a port in use must be a startup error.
    http_.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(registry_->Expose(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }

  ~HttpExporter() override {
    http_.stop();
    if (thread_.joinable()) thread_.join();
  }

  Status Bind(const ExporterOptions& options) {
    if (options.port < 0 || options.port > 65535) {
      return InvalidArgumentError("metrics port " + std::to_string(options.port) +
                                  " is not in 0..65535");
    }
    const std::string where = options.address + ":" + std::to_string(options.port);
    if (options.port == 0) {
      port_ = http_.bind_to_any_port(options.address);
      if (port_ <= 0) return UnavailableError("cannot bind the metrics port on " + where);
    } else {
      if (!http_.bind_to_port(options.address, options.port)) {
        return UnavailableError("cannot bind the metrics port " + where +
                                " (in use, or not an address of this host)");
      }
      port_ = options.port;
    }
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    return Status::OK();
  }

  int port() const override { return port_; }

 private:
  const Registry* const registry_;
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(const ExporterOptions& options,
                                                                  const Registry* registry) {
  auto e = std::make_unique<HttpExporter>(registry);
  RETURN_IF_ERROR(e->Bind(options));
  return std::unique_ptr<MetricsExporter>(std::move(e));
}

std::string BindAddressOf(const std::string& zmq_endpoint) {
  const std::string tcp = "tcp://";
  if (zmq_endpoint.rfind(tcp, 0) != 0) return "127.0.0.1";
  std::string host = zmq_endpoint.substr(tcp.size());
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos) host = host.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "*" || host.empty()) return "0.0.0.0";
  return host;
}

}  // namespace metrics
}  // namespace relaxps

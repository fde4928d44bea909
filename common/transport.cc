#include "common/transport.h"

#include <future>
#include <memory>

namespace relaxps {

StatusOr<Message> Transport::CallSync(int peer, Message request, int timeout_ms) {
  auto promise = std::make_shared<std::promise<StatusOr<Message>>>();
  auto future = promise->get_future();
  Call(peer, std::move(request), timeout_ms, [promise](const Status& s, Message&& reply) {
    if (s.ok()) {
      promise->set_value(std::move(reply));
    } else {
      promise->set_value(s);
    }
  });
  return future.get();
}

}  // namespace relaxps

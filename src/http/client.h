// HTTP/1.1 client for the space CLI (and tests): one connection per call, unix socket or TCP. Bodies
// stream in both directions through callbacks, so copying a large file needs constant memory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "http/url.h"
#include "http/websocket.h"

namespace space::http {

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // empty when the body went to a sink
};

// Receives response body bytes as they arrive; an error aborts the transfer.
using BodySink = std::function<Status(std::string_view)>;
// Fills out with up to max bytes of the request body; 0 at the end.
using BodySource = std::function<Result<size_t>(char* out, size_t max)>;

class Client {
 public:
  Client(Endpoint endpoint, std::string api_key);

  // kUnavailable when the daemon cannot be reached (the message names the endpoint).
  Result<ClientResponse> request(const std::string& method, const std::string& target,
                                 const std::optional<std::string>& json_body = std::nullopt);
  // Success responses (< 300) go to sink as they arrive; others are collected into the body.
  Result<ClientResponse> stream(const std::string& method, const std::string& target,
                                const std::optional<std::string>& json_body, const BodySink& sink);
  // Sends length bytes from source as the body (application/octet-stream); a success response streams
  // to sink when one is given, as in stream().
  Result<ClientResponse> upload(const std::string& method, const std::string& target, uint64_t length,
                                const BodySource& source, const BodySink& sink = nullptr);
  Result<std::unique_ptr<WebSocket>> websocket(const std::string& target);

  const Endpoint& endpoint() const { return endpoint_; }

  struct Conn;

 private:
  Result<std::unique_ptr<Conn>> connect();
  Endpoint endpoint_;
  std::string api_key_;
};

// {"error":{"code":..,"message":..}} -> the message; the raw body when it is not that shape.
std::string errorMessageFromBody(const std::string& body);
ErrorKind errorKindFromStatus(int status);

}  // namespace space::http

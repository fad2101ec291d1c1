// Beast-free view of one HTTP exchange, so that handlers (src/api) compile without Boost headers. The
// server implements BodyReader and ResponseWriter over its socket; tests implement them in memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "http/websocket.h"

namespace space::http {

struct Request {
  std::string method;                                      // upper case, as sent
  std::string target;                                      // raw request target
  std::string path;                                        // percent-decoded path, without the query
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order; keys may repeat
  std::map<std::string, std::string> headers;              // names lower-cased
  bool trusted = false;  // arrived on the unix socket (file permissions are the authentication)
  std::string peer;
  // Set by the handler once the request proved who sent it (a valid API key). The server then counts the
  // connection outside the small pool of unauthenticated ones (http/connection_limits.h).
  bool authenticated = false;

  std::optional<std::string> queryValue(std::string_view key) const;
  std::vector<std::string> queryValues(std::string_view key) const;
  std::optional<std::string> header(std::string_view lower_name) const;
};

// The request body, pulled by the handler so that uploads stream with constant memory.
class BodyReader {
 public:
  virtual ~BodyReader() = default;
  // Up to max bytes into out; 0 at the end of the body.
  virtual Result<size_t> read(char* out, size_t max) = 0;
  virtual std::optional<uint64_t> contentLength() const = 0;
};

// Reads the whole body; kResourceExhausted when it exceeds limit (the caller answers 413).
Result<std::string> readAll(BodyReader& body, size_t limit);

class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response.
  virtual Status send(int status, std::string_view content_type, std::string_view body) = 0;
  // A streamed response: chunked when length is unset, else exactly length bytes must follow.
  virtual Status beginStream(int status, std::string_view content_type, std::optional<uint64_t> length) = 0;
  // Sent to the peer before returning (no buffering: NDJSON lines reach the client as they are written).
  virtual Status write(std::string_view data) = 0;
  virtual Status end() = 0;
  virtual bool started() const = 0;
  virtual int status() const = 0;  // 0 before anything was sent
  virtual bool isWebSocketUpgrade() const = 0;
  // Whether the client has closed its side or the connection failed, checked without reading or waiting.
  // For a response streamed after the whole request was read, the end of the client's input means it
  // left (a client that half-closes after its request looks the same, and is taken as gone).
  virtual bool peerGone() = 0;
  // Completes the upgrade handshake; the connection then belongs to the returned socket.
  virtual Result<std::unique_ptr<WebSocket>> acceptWebSocket() = 0;
};

}  // namespace space::http

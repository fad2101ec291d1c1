#include "http/client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <limits>
#include <nlohmann/json.hpp>

#include "http/beast_detail.h"

namespace space::http {

using namespace detail;

struct Client::Conn {
  std::shared_ptr<asio::io_context> ioc = std::make_shared<asio::io_context>();
  Socket sock{*ioc};
  beast::flat_buffer buf;
  std::string host;
};

namespace {

template <class Fields>
std::map<std::string, std::string> lowerHeaders(const Fields& fields) {
  std::map<std::string, std::string> out;
  for (const auto& f : fields) {
    std::string name(f.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[name] = std::string(f.value());
  }
  return out;
}

Error transportError(const Endpoint& ep, const beast::error_code& ec, std::string_view what) {
  return Error{ErrorKind::kUnavailable, 0, fmt::format("{} {}: {}", what, ep.text, ec.message())};
}

}  // namespace

Client::Client(Endpoint endpoint, std::string api_key) : endpoint_(std::move(endpoint)), api_key_(std::move(api_key)) {}

Result<std::unique_ptr<Client::Conn>> Client::connect() {
  auto conn = std::make_unique<Conn>();
  beast::error_code ec;
  if (endpoint_.is_unix) {
    asio::local::stream_protocol::socket s(*conn->ioc);
    s.connect(asio::local::stream_protocol::endpoint(endpoint_.path), ec);
    if (ec) return tl::unexpected(transportError(endpoint_, ec, "cannot connect to"));
    auto proto = asio::generic::stream_protocol(asio::local::stream_protocol());
    int fd = s.release();
    conn->sock.assign(proto, fd, ec);
    conn->host = "localhost";
  } else {
    asio::ip::tcp::resolver resolver(*conn->ioc);
    auto results = resolver.resolve(endpoint_.host, endpoint_.port, ec);
    if (ec) return tl::unexpected(transportError(endpoint_, ec, "cannot resolve"));
    asio::ip::tcp::socket s(*conn->ioc);
    asio::connect(s, results, ec);
    if (ec) return tl::unexpected(transportError(endpoint_, ec, "cannot connect to"));
    s.set_option(asio::ip::tcp::no_delay(true), ec);
    auto proto = asio::generic::stream_protocol(s.local_endpoint().protocol());
    int fd = s.release();
    conn->sock.assign(proto, fd, ec);
    conn->host = endpoint_.host + ":" + endpoint_.port;
  }
  if (ec) return tl::unexpected(transportError(endpoint_, ec, "cannot connect to"));
  return conn;
}

namespace {

template <class Body>
void setCommon(bhttp::request<Body>& req, const std::string& host, const std::string& key) {
  req.set(bhttp::field::host, host);
  req.set(bhttp::field::user_agent, "space-cli");
  req.keep_alive(false);
  if (!key.empty()) req.set(bhttp::field::authorization, "Bearer " + key);
}

// Reads a response; the body streams to sink when given and the status is a success.
Result<ClientResponse> readResponse(Client::Conn& c, const Endpoint& ep, const BodySink* sink) {
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // see server.cc on boost::none
  beast::error_code ec;
  bhttp::read_header(c.sock, c.buf, parser, ec);
  if (ec) return tl::unexpected(transportError(ep, ec, "reading response from"));
  ClientResponse out;
  out.status = parser.get().result_int();
  out.headers = lowerHeaders(parser.get());
  bool to_sink = sink && out.status < 300;
  char chunk[65536];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    bhttp::read_some(c.sock, c.buf, parser, ec);
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) return tl::unexpected(transportError(ep, ec, "reading response from"));
    size_t n = sizeof chunk - parser.get().body().size;
    if (n == 0) continue;
    if (to_sink) {
      TRY((*sink)(std::string_view(chunk, n)));
    } else if (out.body.size() < (16u << 20)) {
      out.body.append(chunk, n);
    }
  }
  return out;
}

}  // namespace

Result<ClientResponse> Client::request(const std::string& method, const std::string& target,
                                       const std::optional<std::string>& json_body) {
  return stream(method, target, json_body, nullptr);
}

Result<ClientResponse> Client::stream(const std::string& method, const std::string& target,
                                      const std::optional<std::string>& json_body, const BodySink& sink) {
  ASSIGN_OR_RETURN(auto conn, connect());
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
  setCommon(req, conn->host, api_key_);
  if (json_body) {
    req.set(bhttp::field::content_type, "application/json");
    req.body() = *json_body;
  }
  req.prepare_payload();
  beast::error_code ec;
  bhttp::write(conn->sock, req, ec);
  if (ec) {
    // The daemon may have refused the request (413) and closed before reading all of it.
    auto early = readResponse(*conn, endpoint_, nullptr);
    if (early) return early;
    return tl::unexpected(transportError(endpoint_, ec, "sending request to"));
  }
  return readResponse(*conn, endpoint_, sink ? &sink : nullptr);
}

Result<ClientResponse> Client::upload(const std::string& method, const std::string& target, uint64_t length,
                                      const BodySource& source, const BodySink& sink) {
  ASSIGN_OR_RETURN(auto conn, connect());
  bhttp::request<bhttp::buffer_body> req{bhttp::string_to_verb(method), target, 11};
  setCommon(req, conn->host, api_key_);
  req.set(bhttp::field::content_type, "application/octet-stream");
  req.content_length(length);
  req.body().data = nullptr;
  req.body().more = true;
  bhttp::request_serializer<bhttp::buffer_body> sr{req};
  beast::error_code ec;
  bhttp::write_header(conn->sock, sr, ec);
  if (ec) return tl::unexpected(transportError(endpoint_, ec, "sending request to"));
  std::vector<char> chunk(1 << 16);
  uint64_t sent = 0;
  while (sent < length) {
    ASSIGN_OR_RETURN(size_t n,
                     source(chunk.data(), static_cast<size_t>(std::min<uint64_t>(chunk.size(), length - sent))));
    if (n == 0) return makeError(ErrorKind::kInvalidArgument, "source ended after {} of {} bytes", sent, length);
    sent += n;
    req.body().data = chunk.data();
    req.body().size = n;
    req.body().more = sent < length;
    bhttp::write(conn->sock, sr, ec);
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) {
      // The daemon may have answered early (quota, bad path) and closed: its answer says more than EPIPE.
      auto early = readResponse(*conn, endpoint_, nullptr);
      if (early) return early;
      return tl::unexpected(transportError(endpoint_, ec, "sending body to"));
    }
  }
  if (length == 0) {
    req.body().data = nullptr;
    req.body().more = false;
    bhttp::write(conn->sock, sr, ec);
    if (ec == bhttp::error::need_buffer) ec = {};
  }
  return readResponse(*conn, endpoint_, sink ? &sink : nullptr);
}

Result<std::unique_ptr<WebSocket>> Client::websocket(const std::string& target) {
  ASSIGN_OR_RETURN(auto conn, connect());
  return detail::connectWebSocket(conn->ioc, std::move(conn->sock), conn->host, target, api_key_);
}

std::string errorMessageFromBody(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return body.empty() ? std::string("(no message)") : body.substr(0, 500);
}

ErrorKind errorKindFromStatus(int status) {
  switch (status) {
    case 400:
    case 413:
    case 431:
      return ErrorKind::kInvalidArgument;
    case 401:
    case 403:
      return ErrorKind::kUnauthenticated;
    case 404:
      return ErrorKind::kNotFound;
    case 409:
      return ErrorKind::kConflict;
    case 429:
    case 507:
      return ErrorKind::kResourceExhausted;
    case 501:
      return ErrorKind::kUnsupported;
    case 503:
      return ErrorKind::kUnavailable;
    default:
      return ErrorKind::kInternal;
  }
}

}  // namespace space::http

// Internal to src/http: the Beast types shared by server.cc, client.cc and websocket.cc. Nothing outside
// src/http includes this, which keeps Boost headers out of every other translation unit.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>

#include "http/websocket.h"

namespace space::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

// Both unix and TCP connections are carried as generic stream sockets, so each code path exists once.
using Socket = asio::generic::stream_protocol::socket;

// Server side: completes the upgrade handshake for req on sock.
Result<std::unique_ptr<WebSocket>> acceptWebSocket(std::shared_ptr<asio::io_context> ioc, Socket&& sock,
                                                   const bhttp::request<bhttp::buffer_body>& req);
// Client side: performs the handshake for target on a connected socket.
Result<std::unique_ptr<WebSocket>> connectWebSocket(std::shared_ptr<asio::io_context> ioc, Socket&& sock,
                                                    const std::string& host, const std::string& target,
                                                    const std::string& bearer);

}  // namespace space::http::detail

// Boost.Asio (with SSL) for the gateway. Asio 1.74's awaitable.hpp uses std::exchange without including
// <utility>, so <utility> has to come first; clang-format would sort it after, hence the guard. Include this
// instead of any boost/asio header.
#pragma once

// clang-format off
#include <utility>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
// clang-format on

// libFuzzer target: arbitrary bytes as request target and body through every parser an unauthenticated
// client can reach. None may crash, hang or assert; each answers with a command or an error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/routes/routes.h"
#include "api/validate.h"
#include "http/url.h"

using namespace space;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // First line: the request target; the rest: the body.
  size_t nl = in.find('\n');
  std::string_view target = in.substr(0, nl);
  std::string_view body = nl == std::string_view::npos ? std::string_view{} : in.substr(nl + 1);

  if (auto t = http::parseTarget(target)) {
    http::Request req;
    req.path = t->path;
    req.query = t->query;
    (void)api::parseListSandboxes(req);
    (void)api::parsePtyQuery(req);
    for (const auto& [k, v] : t->query) {
      (void)api::parseMode(v);
      (void)api::parseSignal(v);
      (void)api::checkSandboxPath(k, v);
      (void)api::checkName(k, v);
    }
  }
  (void)api::parseCreateSandbox(body, 8ull << 30);
  (void)api::parseExec(body, true);
  (void)api::parseExec(body, false);
  (void)api::parseSignalBody(body);
  (void)api::parsePtyControl(body);
  (void)api::parseExecSessionRequest(body);
  (void)api::parseExecControl(body);
  (void)api::parseMkdir(body);
  (void)api::parseMove(body);
  (void)api::parseBuildTemplate(body);
  (void)api::parseCreateKey(body);
  return 0;
}

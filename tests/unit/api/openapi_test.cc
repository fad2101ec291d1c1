// Every route the server registers is in api/openapi.yaml with its method, and the YAML names no route
// the server lacks.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "api/api_server.h"
#include "fake_manager.h"

namespace space::api {
namespace {

// Reads "paths:" of the OpenAPI file by indentation: "  /path:" then "    get:".
std::set<std::string> openapiRoutes() {
  std::ifstream in(std::string(SPACE_SOURCE_DIR) + "/api/openapi.yaml");
  EXPECT_TRUE(in.good());
  std::set<std::string> out;
  std::string line, path;
  bool in_paths = false;
  while (std::getline(in, line)) {
    if (line.rfind("paths:", 0) == 0) {
      in_paths = true;
      continue;
    }
    if (!in_paths) continue;
    if (!line.empty() && line[0] != ' ' && line[0] != '#') break;  // next top-level key
    if (line.rfind("  /", 0) == 0 && line.back() == ':') {
      path = line.substr(2, line.size() - 3);
    } else if (line.size() > 4 && line.rfind("    ", 0) == 0 && line[4] != ' ' && line.back() == ':') {
      std::string method = line.substr(4, line.size() - 5);
      if (method == "parameters") continue;
      for (auto& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      out.insert(method + " " + path);
    }
  }
  return out;
}

// Every operation names itself (operationId, unique) and its group (tags), for generated clients.
TEST(OpenApi, EveryOperationHasAnIdAndTags) {
  std::ifstream in(std::string(SPACE_SOURCE_DIR) + "/api/openapi.yaml");
  std::string line, op;
  std::map<std::string, std::string> id_of, tags_of;
  std::set<std::string> ids;
  bool in_paths = false;
  std::string path;
  while (std::getline(in, line)) {
    if (line.rfind("paths:", 0) == 0)
      in_paths = true;
    else if (in_paths && !line.empty() && line[0] != ' ' && line[0] != '#')
      break;
    if (!in_paths) continue;
    if (line.rfind("  /", 0) == 0 && line.back() == ':') path = line.substr(2, line.size() - 3);
    for (const char* m : {"get", "put", "post", "delete"})
      if (line == std::string("    ") + m + ":") op = std::string(m) + " " + path;
    if (line.rfind("      operationId: ", 0) == 0) {
      std::string id = line.substr(19);
      EXPECT_TRUE(ids.insert(id).second) << "operationId " << id << " is used twice";
      id_of[op] = id;
    }
    if (line.rfind("      tags: [", 0) == 0) tags_of[op] = line.substr(12);
  }
  auto routes = openapiRoutes();
  EXPECT_EQ(id_of.size(), routes.size());
  EXPECT_EQ(tags_of.size(), routes.size());
}

TEST(OpenApi, MatchesRegisteredRoutes) {
  testing::FakeManager manager;
  ApiServer api(manager, ApiOptions{});
  std::set<std::string> registered;
  for (const auto& r : api.router().routes()) registered.insert(r.method + " " + r.pattern);
  auto documented = openapiRoutes();
  for (const auto& r : registered) EXPECT_TRUE(documented.count(r)) << r << " is served but not in api/openapi.yaml";
  for (const auto& d : documented) EXPECT_TRUE(registered.count(d)) << d << " is in api/openapi.yaml but not served";
  EXPECT_GE(registered.size(), 25u);
}

}  // namespace
}  // namespace space::api

// Strict reading of a JSON request object: every field has one type, absent fields are optional, and a
// field the route does not know is refused (a misspelt "memory_mb" must not silently mean "default").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace space::api {

class JsonInput {
 public:
  // An empty body is an empty object.
  static Result<JsonInput> parse(std::string_view body, std::initializer_list<std::string_view> allowed_fields);

  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  Result<std::optional<std::string>> string(const std::string& key, size_t max_len = 4096) const;
  Result<std::optional<double>> number(const std::string& key) const;
  Result<std::optional<int64_t>> integer(const std::string& key) const;
  Result<std::optional<bool>> boolean(const std::string& key) const;
  Result<std::optional<std::vector<std::string>>> stringArray(const std::string& key, size_t max_items) const;
  Result<std::map<std::string, std::string>> stringMap(const std::string& key, size_t max_items) const;
  const nlohmann::json& raw() const { return j_; }

 private:
  nlohmann::json j_;
};

}  // namespace space::api

#include "api/json_input.h"

namespace space::api {
namespace {

Error typeError(const std::string& key, std::string_view want) {
  return Error{ErrorKind::kInvalidArgument, 0, fmt::format("field '{}' must be {}", key, want)};
}

}  // namespace

Result<JsonInput> JsonInput::parse(std::string_view body, std::initializer_list<std::string_view> allowed) {
  JsonInput in;
  bool blank = body.find_first_not_of(" \t\r\n") == std::string_view::npos;
  if (blank) {
    in.j_ = nlohmann::json::object();
    return in;
  }
  in.j_ = nlohmann::json::parse(body, nullptr, false);
  if (in.j_.is_discarded()) return makeError(ErrorKind::kInvalidArgument, "request body is not valid JSON");
  if (!in.j_.is_object()) return makeError(ErrorKind::kInvalidArgument, "request body must be a JSON object");
  for (const auto& [key, value] : in.j_.items()) {
    bool known = false;
    for (auto a : allowed) known = known || key == a;
    if (!known) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return makeError(ErrorKind::kInvalidArgument, "unknown field '{}' (allowed: {})", key.substr(0, 64), list);
    }
  }
  return in;
}

Result<std::optional<std::string>> JsonInput::string(const std::string& key, size_t max_len) const {
  if (!has(key)) return std::optional<std::string>{};
  const auto& v = j_[key];
  if (!v.is_string()) return tl::unexpected(typeError(key, "a string"));
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_len)
    return makeError(ErrorKind::kInvalidArgument, "field '{}' is longer than {} bytes", key, max_len);
  if (s.find('\0') != std::string::npos)
    return makeError(ErrorKind::kInvalidArgument, "field '{}' contains a NUL byte", key);
  return std::optional<std::string>{s};
}

Result<std::optional<double>> JsonInput::number(const std::string& key) const {
  if (!has(key)) return std::optional<double>{};
  const auto& v = j_[key];
  if (!v.is_number()) return tl::unexpected(typeError(key, "a number"));
  return std::optional<double>{v.get<double>()};
}

Result<std::optional<int64_t>> JsonInput::integer(const std::string& key) const {
  if (!has(key)) return std::optional<int64_t>{};
  const auto& v = j_[key];
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 512.0 is an integer to a JavaScript client; 512.5 is not.
    if (d != static_cast<double>(static_cast<int64_t>(d)) || d > 9e15 || d < -9e15) {
      return tl::unexpected(typeError(key, "an integer"));
    }
    return std::optional<int64_t>{static_cast<int64_t>(d)};
  }
  if (!v.is_number_integer()) return tl::unexpected(typeError(key, "an integer"));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return makeError(ErrorKind::kInvalidArgument, "field '{}' is out of range", key);
  }
  return std::optional<int64_t>{v.get<int64_t>()};
}

Result<std::optional<bool>> JsonInput::boolean(const std::string& key) const {
  if (!has(key)) return std::optional<bool>{};
  const auto& v = j_[key];
  if (!v.is_boolean()) return tl::unexpected(typeError(key, "true or false"));
  return std::optional<bool>{v.get<bool>()};
}

Result<std::optional<std::vector<std::string>>> JsonInput::stringArray(const std::string& key, size_t max_items) const {
  if (!has(key)) return std::optional<std::vector<std::string>>{};
  const auto& v = j_[key];
  if (!v.is_array()) return tl::unexpected(typeError(key, "an array of strings"));
  if (v.size() > max_items)
    return makeError(ErrorKind::kInvalidArgument, "field '{}' has more than {} items", key, max_items);
  std::vector<std::string> out;
  for (const auto& item : v) {
    if (!item.is_string()) return tl::unexpected(typeError(key, "an array of strings"));
    const auto& s = item.get_ref<const std::string&>();
    if (s.find('\0') != std::string::npos)
      return makeError(ErrorKind::kInvalidArgument, "field '{}' contains a NUL byte", key);
    out.push_back(s);
  }
  return std::optional<std::vector<std::string>>{std::move(out)};
}

Result<std::map<std::string, std::string>> JsonInput::stringMap(const std::string& key, size_t max_items) const {
  std::map<std::string, std::string> out;
  if (!has(key)) return out;
  const auto& v = j_[key];
  if (!v.is_object()) return tl::unexpected(typeError(key, "an object of strings"));
  if (v.size() > max_items)
    return makeError(ErrorKind::kInvalidArgument, "field '{}' has more than {} entries", key, max_items);
  for (const auto& [k, item] : v.items()) {
    if (!item.is_string())
      return makeError(ErrorKind::kInvalidArgument, "field '{}.{}' must be a string", key, k.substr(0, 64));
    const auto& s = item.get_ref<const std::string&>();
    if (s.find('\0') != std::string::npos || k.find('\0') != std::string::npos) {
      return makeError(ErrorKind::kInvalidArgument, "field '{}' contains a NUL byte", key);
    }
    out[k] = s;
  }
  return out;
}

}  // namespace space::api

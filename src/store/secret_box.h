// Secret values at rest: AES-256-GCM under the node key, a 32-byte file in the state directory created
// 0600 on first use. Each value is sealed with a fresh 96-bit nonce and its secret's name as associated
// data, so a sealed value moved to another name does not open.
#pragma once

#include <string>

#include "common/result.h"

namespace space::store {

class SecretBox {
 public:
  // Reads the key at key_path, creating it (0600, random) when it does not exist.
  static Result<SecretBox> open(const std::string& key_path);
  // hex(nonce || ciphertext || tag)
  Result<std::string> seal(const std::string& plaintext, const std::string& name) const;
  Result<std::string> unseal(const std::string& sealed, const std::string& name) const;

 private:
  std::string key_;  // 32 bytes
};

}  // namespace space::store

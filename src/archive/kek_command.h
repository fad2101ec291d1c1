// The external-command KEK: the hook through which a KMS (or an HSM's tool) wraps and unwraps data keys
// without the key-encryption key ever entering SPACE. Protocol (docs/snapshot-archive.md):
//   <argv...> wrap     stdin: the 32-byte data key      stdout: the wrapped key (opaque, <= 64 KiB)
//   <argv...> unwrap   stdin: the wrapped key           stdout: the 32-byte data key
//   environment: SPACE_KEK_ID (the configured id), SPACE_KEK_CONTEXT (hex of the binding context, to be
//   used as the KMS's encryption context / associated data); exit status 0 means success, anything on
//   stderr is quoted in the error. The command gets 60 s.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "archive/kek.h"

namespace space::archive {

Result<std::unique_ptr<Kek>> makeCommandKek(std::vector<std::string> argv, std::string key_id);

}  // namespace space::archive

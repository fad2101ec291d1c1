// One chunk's way into and out of an archive: its id (a keyed hash of the plaintext), zstd compression,
// and AES-256-GCM under the tenant's data key with the chunk's id as associated data.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace space::archive {

class ChunkCodec {
 public:
  // key: the 32-byte DEK; dek_id: its id (dataKeyId).
  ChunkCodec(std::string key, std::string dek_id);
  ~ChunkCodec();
  ChunkCodec(ChunkCodec&&) noexcept;

  // HMAC-SHA256 of the plaintext under a key derived from the DEK, in hex. Keyed, so that a chunk id
  // (a file name in the chunk store, a field in the clear part of nothing) does not let anyone without
  // the DEK confirm a guess of the content; identical chunks of one tenant still share one id.
  std::string idOf(std::string_view plaintext) const;

  // nonce | ciphertext of zstd(plaintext) | tag; associated data names the DEK and the chunk id, so a
  // record moved under another id does not open.
  Result<std::string> seal(const std::string& id, std::string_view plaintext);
  // Authenticates, decompresses, and checks the length and the id of the plaintext.
  Result<std::string> open(const std::string& id, uint64_t raw_length, std::string_view record);

  // The manifest: sealed under the DEK; aad is manifestAssociatedData (format.h).
  Result<std::string> sealManifest(std::string_view manifest, std::string_view aad) const;
  Result<std::string> openManifest(std::string_view record, std::string_view aad) const;

 private:
  std::string chunkAad(const std::string& id) const;
  std::string key_, dek_id_, id_key_;
  std::unique_ptr<ZSTD_CCtx_s, size_t (*)(ZSTD_CCtx_s*)> cctx_;
  std::unique_ptr<ZSTD_DCtx_s, size_t (*)(ZSTD_DCtx_s*)> dctx_;
};

}  // namespace space::archive

#include "archive/chunk_codec.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <zstd.h>

#include "common/hex.h"
#include "crypto/aes_gcm.h"

namespace space::archive {
namespace {

constexpr int kZstdLevel = 3;  // zstd's default: most of the ratio at a fraction of the cost of higher levels

std::string hmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

}  // namespace

ChunkCodec::ChunkCodec(std::string key, std::string dek_id)
    : key_(std::move(key)),
      dek_id_(std::move(dek_id)),
      id_key_(hmacSha256(key_, "space-chunk-id-v1")),
      cctx_(ZSTD_createCCtx(), ZSTD_freeCCtx),
      dctx_(ZSTD_createDCtx(), ZSTD_freeDCtx) {}
ChunkCodec::~ChunkCodec() = default;
ChunkCodec::ChunkCodec(ChunkCodec&&) noexcept = default;

std::string ChunkCodec::idOf(std::string_view plaintext) const { return toHex(hmacSha256(id_key_, plaintext)); }

std::string ChunkCodec::chunkAad(const std::string& id) const {
  return fmt::format("space-chunk-v1|{}|{}", dek_id_, id);
}

Result<std::string> ChunkCodec::seal(const std::string& id, std::string_view plaintext) {
  std::string compressed(ZSTD_compressBound(plaintext.size()), '\0');
  size_t n = ZSTD_compressCCtx(cctx_.get(), compressed.data(), compressed.size(), plaintext.data(), plaintext.size(),
                               kZstdLevel);
  if (ZSTD_isError(n)) return makeError(ErrorKind::kInternal, "zstd compress: {}", ZSTD_getErrorName(n));
  compressed.resize(n);
  return crypto::aesGcmSeal(key_, chunkAad(id), compressed);
}

Result<std::string> ChunkCodec::open(const std::string& id, uint64_t raw_length, std::string_view record) {
  auto compressed = crypto::aesGcmOpen(key_, chunkAad(id), record);
  if (!compressed)
    return makeError(ErrorKind::kUnauthenticated, "chunk {} does not authenticate (altered, or another key)", id);
  unsigned long long declared = ZSTD_getFrameContentSize(compressed->data(), compressed->size());
  if (declared != raw_length)
    return makeError(ErrorKind::kInvalidArgument, "chunk {} holds {} bytes, not {}", id, declared, raw_length);
  std::string plain(raw_length, '\0');
  size_t n = ZSTD_decompressDCtx(dctx_.get(), plain.data(), plain.size(), compressed->data(), compressed->size());
  if (ZSTD_isError(n) || n != raw_length)
    return makeError(ErrorKind::kInvalidArgument, "chunk {} does not decompress", id);
  if (idOf(plain) != id) return makeError(ErrorKind::kUnauthenticated, "chunk {} does not match its content hash", id);
  return plain;
}

Result<std::string> ChunkCodec::sealManifest(std::string_view manifest, std::string_view aad) const {
  return crypto::aesGcmSeal(key_, fmt::format("space-manifest-v1|{}", aad), manifest);
}

Result<std::string> ChunkCodec::openManifest(std::string_view record, std::string_view aad) const {
  auto manifest = crypto::aesGcmOpen(key_, fmt::format("space-manifest-v1|{}", aad), record);
  if (!manifest)
    return makeError(ErrorKind::kUnauthenticated,
                     "archive manifest or header does not authenticate (altered, or another key)");
  return manifest;
}

}  // namespace space::archive

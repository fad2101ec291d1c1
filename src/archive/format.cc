#include "archive/format.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/hex.h"
#include "crypto/aes_gcm.h"

namespace space::archive {
namespace {

using json = nlohmann::json;

void putU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i) & 0xff);
}
void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(v >> (8 * i) & 0xff);
}
uint64_t getLe(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

bool isHex(std::string_view s, size_t len) { return s.size() == len && fromHex(s).has_value(); }

tl::unexpected<Error> malformed(std::string_view part, std::string_view why) {
  return makeError(ErrorKind::kInvalidArgument, "archive {} is malformed: {}", part, why);
}

// Parses a JSON object from untrusted bytes; nullopt-like error instead of exceptions.
Result<json> parseObject(std::string_view text, std::string_view part) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return malformed(part, "not a JSON object");
  return j;
}

const char* kindName(ArchiveKind kind) { return kind == ArchiveKind::kSnapshot ? "snapshot" : "sealed-file"; }

}  // namespace

bool validRelativePath(std::string_view path) {
  if (path.empty() || path.size() > 4096 || path.front() == '/') return false;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(pos, end - pos);
    if (part.empty() || part == "." || part == ".." || part.size() > 255) return false;
    if (part.find('\0') != std::string_view::npos) return false;
    pos = end + 1;
  }
  return true;
}

std::string encodeLead(const Lead& lead) {
  std::string out(kArchiveMagic);
  putU32(out, kFormatVersion);
  putU32(out, lead.header_len);
  putU32(out, lead.key_block_len);
  putU32(out, 0);
  return out;
}

std::string manifestAssociatedData(std::string_view lead, std::string_view header) {
  return std::string(lead.substr(0, 16)) + std::string(header);
}

Result<Lead> parseLead(std::string_view b) {
  if (b.size() != kLeadBytes || b.substr(0, 8) != kArchiveMagic)
    return malformed("lead", "not a SPACE archive (bad magic)");
  if (getLe(b, 8, 4) != kFormatVersion)
    return malformed("lead", fmt::format("format version {} is not {}", getLe(b, 8, 4), kFormatVersion));
  Lead lead{static_cast<uint32_t>(getLe(b, 12, 4)), static_cast<uint32_t>(getLe(b, 16, 4))};
  if (getLe(b, 20, 4) != 0) return malformed("lead", "reserved field is not zero");
  if (lead.header_len == 0 || lead.header_len > kMaxHeaderBytes) return malformed("lead", "header length out of range");
  if (lead.key_block_len == 0 || lead.key_block_len > kMaxKeyBlockBytes)
    return malformed("lead", "key block length out of range");
  return lead;
}

std::string encodeTrailer(const Trailer& t) {
  std::string out(kTrailerMagic);
  putU64(out, t.body_start);
  putU64(out, t.manifest_offset);
  putU64(out, t.manifest_len);
  return out;
}

Result<Trailer> parseTrailer(std::string_view b, uint64_t file_size, const Lead& lead) {
  if (b.size() != kTrailerBytes || b.substr(0, 8) != kTrailerMagic)
    return malformed("trailer", "missing (truncated file?)");
  Trailer t{getLe(b, 8, 8), getLe(b, 16, 8), getLe(b, 24, 8)};
  uint64_t body_start = kLeadBytes + uint64_t{lead.header_len} + lead.key_block_len;
  if (t.body_start != body_start) return malformed("trailer", "body start does not match the lead");
  if (t.manifest_len < crypto::kGcmOverhead || t.manifest_len > kMaxManifestBytes + crypto::kGcmOverhead)
    return malformed("trailer", "manifest length out of range");
  if (file_size < body_start + kTrailerBytes || t.manifest_offset > file_size ||
      body_start + t.manifest_offset + t.manifest_len + kTrailerBytes != file_size)
    return malformed("trailer", "manifest does not end where the trailer begins (truncated or extended file)");
  return t;
}

std::string encodeHeader(const Header& h) {
  json j = {{"format", kFormatVersion}, {"archive_id", h.archive_id}, {"kind", kindName(h.kind)},
            {"tenant", h.tenant},       {"dek_id", h.dek_id},         {"chunk_size", h.chunk_size},
            {"cipher", "aes-256-gcm"},  {"compression", "zstd"}};
  return j.dump();
}

Result<Header> parseHeader(std::string_view text) {
  ASSIGN_OR_RETURN(json j, parseObject(text, "header"));
  Header h;
  try {
    if (j.at("format").get<uint32_t>() != kFormatVersion) return malformed("header", "unknown format");
    if (j.at("cipher").get<std::string>() != "aes-256-gcm") return malformed("header", "unknown cipher");
    if (j.at("compression").get<std::string>() != "zstd") return malformed("header", "unknown compression");
    h.archive_id = j.at("archive_id").get<std::string>();
    std::string kind = j.at("kind").get<std::string>();
    if (kind == "snapshot")
      h.kind = ArchiveKind::kSnapshot;
    else if (kind == "sealed-file")
      h.kind = ArchiveKind::kSealedFile;
    else
      return malformed("header", "unknown kind");
    h.tenant = j.at("tenant").get<std::string>();
    h.dek_id = j.at("dek_id").get<std::string>();
    h.chunk_size = j.at("chunk_size").get<uint64_t>();
  } catch (const json::exception& e) {
    return malformed("header", e.what());
  }
  if (j.size() != 8) return malformed("header", "unexpected fields");
  if (!isHex(h.archive_id, 32)) return malformed("header", "archive id");
  if (!isHex(h.dek_id, 32)) return malformed("header", "data key id");
  if (!validTenant(h.tenant)) return malformed("header", "tenant");
  if (h.chunk_size < kMinChunkSize || h.chunk_size > kMaxChunkSize)
    return malformed("header", "chunk size out of range");
  return h;
}

std::string encodeKeyBlock(const std::vector<KeySlot>& slots) {
  json arr = json::array();
  for (const auto& s : slots) arr.push_back({{"kek_id", s.kek_id}, {"wrapped", toHex(s.wrapped)}});
  return json{{"slots", arr}}.dump();
}

Result<std::vector<KeySlot>> parseKeyBlock(std::string_view text) {
  ASSIGN_OR_RETURN(json j, parseObject(text, "key block"));
  std::vector<KeySlot> slots;
  try {
    if (j.size() != 1) return malformed("key block", "unexpected fields");
    const json& arr = j.at("slots");
    if (!arr.is_array() || arr.empty() || arr.size() > 64) return malformed("key block", "needs 1 to 64 slots");
    for (const auto& s : arr) {
      if (!s.is_object() || s.size() != 2) return malformed("key block", "slot fields");
      auto wrapped = fromHex(s.at("wrapped").get<std::string>());
      std::string kek_id = s.at("kek_id").get<std::string>();
      if (!wrapped || wrapped->empty() || kek_id.empty()) return malformed("key block", "slot values");
      slots.push_back({std::move(kek_id), std::move(*wrapped)});
    }
  } catch (const json::exception& e) {
    return malformed("key block", e.what());
  }
  return slots;
}

std::string encodeManifest(const Manifest& m) {
  json chunks = json::array(), files = json::array();
  for (const auto& c : m.chunks) chunks.push_back(json::array({c.id, c.offset, c.length, c.raw_length, c.in_archive}));
  for (const auto& f : m.files) {
    json extents = json::array();
    for (const auto& e : f.extents) extents.push_back(json::array({e.offset, e.chunk}));
    files.push_back({{"path", f.path}, {"size", f.size}, {"mode", f.mode}, {"extents", extents}});
  }
  return json{
      {"archive_id", m.archive_id}, {"chunk_area_length", m.chunk_area_length}, {"chunks", chunks}, {"files", files}}
      .dump();
}

Result<Manifest> parseManifest(std::string_view text, const Header& h) {
  ASSIGN_OR_RETURN(json j, parseObject(text, "manifest"));
  Manifest m;
  try {
    m.archive_id = j.at("archive_id").get<std::string>();
    m.chunk_area_length = j.at("chunk_area_length").get<uint64_t>();
    for (const auto& c : j.at("chunks")) {
      if (!c.is_array() || c.size() != 5) return malformed("manifest", "chunk entry");
      m.chunks.push_back({c[0].get<std::string>(), c[1].get<uint64_t>(), c[2].get<uint64_t>(), c[3].get<uint64_t>(),
                          c[4].get<bool>()});
    }
    for (const auto& f : j.at("files")) {
      FileEntry e{f.at("path").get<std::string>(), f.at("size").get<uint64_t>(), f.at("mode").get<uint32_t>(), {}};
      for (const auto& x : f.at("extents")) {
        if (!x.is_array() || x.size() != 2) return malformed("manifest", "extent entry");
        e.extents.push_back({x[0].get<uint64_t>(), x[1].get<uint64_t>()});
      }
      m.files.push_back(std::move(e));
    }
  } catch (const json::exception& e) {
    return malformed("manifest", e.what());
  }
  if (m.archive_id != h.archive_id) return malformed("manifest", "belongs to another archive");

  // Chunk records in the archive tile the chunk area exactly, in order: no byte of the body goes
  // unauthenticated, and no record overlaps another.
  std::set<std::string> ids;
  uint64_t expect_offset = 0;
  uint64_t max_record =
      crypto::kGcmOverhead + h.chunk_size + h.chunk_size / 64 + 1024;  // zstd's worst case, rounded up
  for (const auto& c : m.chunks) {
    if (!isHex(c.id, 64) || !ids.insert(c.id).second) return malformed("manifest", "chunk id missing or repeated");
    if (c.raw_length == 0 || c.raw_length > h.chunk_size) return malformed("manifest", "chunk length out of range");
    if (!c.in_archive) {
      if (c.offset != 0 || c.length != 0) return malformed("manifest", "chunk outside the archive has a record");
      continue;
    }
    if (c.offset != expect_offset || c.length <= crypto::kGcmOverhead || c.length > max_record)
      return malformed("manifest", "chunk records do not tile the chunk area");
    expect_offset += c.length;
  }
  if (expect_offset != m.chunk_area_length)
    return malformed("manifest", "chunk area length does not match its records");

  std::vector<bool> used(m.chunks.size(), false);
  std::set<std::string> paths;
  if (h.kind == ArchiveKind::kSealedFile && m.files.size() != 1)
    return malformed("manifest", "a sealed file holds one file");
  for (const auto& f : m.files) {
    if (!validRelativePath(f.path) || !paths.insert(f.path).second)
      return malformed("manifest", "file path invalid or repeated");
    if (f.size > kMaxFileSize) return malformed("manifest", "file size out of range");
    if (f.mode > 0777) return malformed("manifest", "file mode");
    uint64_t next = 0;
    for (const auto& e : f.extents) {
      if (e.offset % h.chunk_size != 0 || e.offset < next || e.offset >= f.size)
        return malformed("manifest", "extent offset");
      if (e.chunk >= m.chunks.size()) return malformed("manifest", "extent names no chunk");
      if (m.chunks[e.chunk].raw_length != std::min<uint64_t>(h.chunk_size, f.size - e.offset))
        return malformed("manifest", "extent length does not match its chunk");
      used[e.chunk] = true;
      next = e.offset + h.chunk_size;
    }
  }
  if (std::find(used.begin(), used.end(), false) != used.end())
    return malformed("manifest", "a chunk is not used by any file");
  return m;
}

}  // namespace space::archive

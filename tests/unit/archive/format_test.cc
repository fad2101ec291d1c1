#include "archive/format.h"

#include <gtest/gtest.h>

namespace space::archive {
namespace {

Header header() { return {std::string(32, 'a'), ArchiveKind::kSnapshot, "acme", std::string(32, 'b'), 64 * 1024}; }

Manifest manifest() {
  Manifest m;
  m.archive_id = std::string(32, 'a');
  m.chunks = {{std::string(64, '1'), 0, 100, 64 * 1024, true}, {std::string(64, '2'), 100, 50, 10, true}};
  m.chunk_area_length = 150;
  m.files = {{"disk.img", 64 * 1024 + 10, 0644, {{0, 0}, {64 * 1024, 1}}}};
  return m;
}

TEST(ArchiveFormat, EncodingsRoundTrip) {
  auto h = parseHeader(encodeHeader(header()));
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_EQ(h->tenant, "acme");
  EXPECT_EQ(h->chunk_size, 64u * 1024);
  auto m = parseManifest(encodeManifest(manifest()), header());
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->files[0].extents.size(), 2u);
  auto lead = parseLead(encodeLead({10, 20}));
  ASSERT_TRUE(lead);
  EXPECT_EQ(lead->key_block_len, 20u);
  auto slots = parseKeyBlock(encodeKeyBlock({{"local:ab", "wrapped"}}));
  ASSERT_TRUE(slots);
  EXPECT_EQ((*slots)[0].wrapped, "wrapped");
  uint64_t size = kLeadBytes + 30 + 150 + 40 + kTrailerBytes;
  auto t = parseTrailer(encodeTrailer({kLeadBytes + 30, 150, 40}), size, *lead);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_FALSE(parseTrailer(encodeTrailer({kLeadBytes + 30, 150, 40}), size - 1, *lead));
}

TEST(ArchiveFormat, ManifestCrossReferencesAreChecked) {
  auto expectRejected = [](Manifest m, const char* why) {
    EXPECT_FALSE(parseManifest(encodeManifest(m), header())) << why;
  };
  Manifest m = manifest();
  m.files[0].path = "../escape";
  expectRejected(m, "dot-dot path");
  m = manifest();
  m.files[0].path = "/abs";
  expectRejected(m, "absolute path");
  m = manifest();
  m.files[0].path = "a//b";
  expectRejected(m, "empty component");
  m = manifest();
  m.files.push_back(m.files[0]);
  expectRejected(m, "repeated path");
  m = manifest();
  m.chunks[1].offset = 90;
  expectRejected(m, "overlapping records");
  m = manifest();
  m.chunk_area_length = 151;
  expectRejected(m, "unaccounted bytes in the chunk area");
  m = manifest();
  m.files[0].extents = {{0, 0}};
  expectRejected(m, "unused chunk");
  m = manifest();
  m.files[0].extents[1].offset = 1000;
  expectRejected(m, "misaligned extent");
  m = manifest();
  m.files[0].extents[1].chunk = 7;
  expectRejected(m, "extent without chunk");
  m = manifest();
  m.files[0].size = 64 * 1024 + 11;
  expectRejected(m, "chunk length does not match the file's tail");
  m = manifest();
  m.chunks[0].id = std::string(64, 'G');
  expectRejected(m, "bad chunk id");
  m = manifest();
  m.archive_id = std::string(32, 'c');
  expectRejected(m, "another archive's manifest");
  m = manifest();
  m.files[0].mode = 04755;
  expectRejected(m, "setuid mode");
  EXPECT_FALSE(parseManifest("[]", header()));
  EXPECT_FALSE(parseManifest("{\"archive_id\":1}", header()));
}

TEST(ArchiveFormat, HeaderAndLeadRejectTheUnexpected) {
  Header h = header();
  h.chunk_size = 1;
  EXPECT_FALSE(parseHeader(encodeHeader(h)));
  h = header();
  h.tenant = "Acme Corp";
  EXPECT_FALSE(parseHeader(encodeHeader(h)));
  EXPECT_FALSE(parseHeader("{}"));
  EXPECT_FALSE(parseHeader("not json"));
  std::string lead = encodeLead({10, 20});
  lead[0] = 'X';
  EXPECT_FALSE(parseLead(lead));
  lead = encodeLead({10, 20});
  lead[8] = 2;  // version
  EXPECT_FALSE(parseLead(lead));
  EXPECT_FALSE(parseLead(encodeLead({0, 20})));
  EXPECT_FALSE(parseLead(encodeLead({10, 1 << 30})));
  EXPECT_FALSE(parseKeyBlock("{\"slots\":[]}"));
  EXPECT_FALSE(parseKeyBlock("{\"slots\":[{\"kek_id\":\"x\",\"wrapped\":\"zz\"}]}"));
}

}  // namespace
}  // namespace space::archive

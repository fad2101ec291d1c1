#include "archive/archive.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "archive/format.h"
#include "archive_test_util.h"
#include "common/hex.h"

namespace space::archive {
namespace {

using namespace testing;
constexpr uint64_t kMiB = 1 << 20;

struct Fixture : ::testing::Test {
  TempDir tmp;
  std::unique_ptr<Kek> kek = testKek('k');
  DataKey key = *newDataKey("acme", *kek);

  // A small snapshot: compressible text in two files, one nested, one sparse.
  std::string smallSnapshot(const std::string& name = "snap") {
    std::string dir = tmp / name;
    std::filesystem::create_directories(dir + "/sub");
    writeFile(dir + "/snapshot.json", R"({"id":"snap-1","kind":"filesystem"})", 0600);
    writeFile(dir + "/sub/state", textBytes(20 * 1024, 1), 0640);
    makeSparse(dir + "/disk.img", 8 * kMiB);
    writeAt(dir + "/disk.img", 3 * kMiB + 17, textBytes(10 * 1024, 2));
    writeAt(dir + "/disk.img", 5 * kMiB - 100, textBytes(300, 3));
    return dir;
  }

  Result<ExportStats> exportSmall(const std::string& out, uint64_t chunk_size = 64 * 1024) {
    ExportOptions options;
    options.chunk_size = chunk_size;
    return exportSnapshot(smallSnapshot(), out, key, options);
  }

  void expectSameTree(const std::string& a, const std::string& b) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(a)) {
      auto rel = std::filesystem::relative(e.path(), a).string();
      ASSERT_TRUE(std::filesystem::exists(b + "/" + rel)) << rel;
      if (!e.is_regular_file()) continue;
      EXPECT_EQ(fileSize(e.path()), fileSize(b + "/" + rel)) << rel;
      EXPECT_TRUE(sameContent(e.path(), b + "/" + rel)) << rel;
      struct stat sa, sb;
      stat(e.path().c_str(), &sa);
      stat((b + "/" + rel).c_str(), &sb);
      EXPECT_EQ(sa.st_mode & 0777, sb.st_mode & 0777) << rel;
    }
    size_t na = std::distance(std::filesystem::recursive_directory_iterator(a), {});
    size_t nb = std::distance(std::filesystem::recursive_directory_iterator(b), {});
    EXPECT_EQ(na, nb);
  }

  // Import must fail and leave the destination's parent as it was.
  void expectImportsNothing(const std::string& archive, const Kek& with, const std::string& why) {
    std::string parent = tmp / "out";
    std::filesystem::create_directories(parent);
    auto before = listDir(parent);
    auto imported = importSnapshot(archive, parent + "/restored", with);
    EXPECT_FALSE(imported) << why;
    EXPECT_EQ(listDir(parent), before) << why;
  }
};

using Archive = Fixture;

TEST_F(Archive, RoundTripsFilesModesNestingAndHoles) {
  std::string snap = smallSnapshot();
  auto stats = exportSnapshot(snap, tmp / "a.spacearc", key);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->files, 3u);
  EXPECT_EQ(fileSize(tmp / "a.spacearc"), stats->archive_bytes);
  auto archive_stat = std::filesystem::status(tmp / "a.spacearc");
  EXPECT_EQ(archive_stat.permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  auto imported = importSnapshot(tmp / "a.spacearc", tmp / "restored", *kek);
  ASSERT_TRUE(imported) << imported.error().message;
  EXPECT_EQ(imported->files, 3u);
  expectSameTree(snap, tmp / "restored");
  // The 8 MiB image holds 70 KiB of data; the restored one is still sparse.
  EXPECT_LT(allocatedBytes(tmp / "restored/disk.img"), 1 * kMiB);
  // The plaintext is nowhere in the archive.
  EXPECT_EQ(readFile(tmp / "a.spacearc").find("snapshot line"), std::string::npos);
}

TEST_F(Archive, FourGiBSparseImageWithTenMiBOfDataCostsTenMiB) {
  std::string dir = tmp / "snap";
  std::filesystem::create_directories(dir);
  std::string img = dir + "/disk.img";
  makeSparse(img, 4096 * kMiB);
  // 10 MiB of incompressible data in ten places, some straddling chunk boundaries.
  for (int i = 0; i < 10; ++i) writeAt(img, static_cast<uint64_t>(i) * 397 * kMiB + kMiB / 2, randomBytes(kMiB, i));
  auto stats = exportSnapshot(dir, tmp / "big.spacearc", key);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_LT(stats->archive_bytes, 21 * kMiB);  // ten 1 MiB writes, each over two 1 MiB chunks, half zero
  EXPECT_LT(stats->data_bytes, 21 * kMiB);     // holes were never read
  std::cout << "4 GiB image, 10 MiB data -> archive " << stats->archive_bytes / kMiB << " MiB, " << stats->data_chunks
            << " data chunks\n";

  auto imported = importSnapshot(tmp / "big.spacearc", tmp / "restored", *kek);
  ASSERT_TRUE(imported) << imported.error().message;
  EXPECT_EQ(fileSize(tmp / "restored/disk.img"), 4096 * kMiB);
  EXPECT_LT(allocatedBytes(tmp / "restored/disk.img"), 12 * kMiB);
  EXPECT_TRUE(sameSparseContent(img, tmp / "restored/disk.img"));
}

TEST_F(Archive, StoresIdenticalChunksOnce) {
  std::string dir = tmp / "snap";
  std::filesystem::create_directories(dir);
  std::string block = randomBytes(kMiB, 7);
  writeFile(dir + "/a", block + block + block);
  writeFile(dir + "/b", block);
  auto stats = exportSnapshot(dir, tmp / "a.spacearc", key);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->data_chunks, 4u);
  EXPECT_EQ(stats->unique_chunks, 1u);
  EXPECT_LT(stats->archive_bytes, kMiB + 64 * 1024);
  ASSERT_TRUE(importSnapshot(tmp / "a.spacearc", tmp / "restored", *kek));
  expectSameTree(dir, tmp / "restored");
}

TEST_F(Archive, DedupsAcrossArchivesThroughTheChunkStore) {
  std::string store = tmp / "chunks";
  std::string first = tmp / "first", second = tmp / "second";
  std::filesystem::create_directories(first);
  std::filesystem::create_directories(second);
  // The second snapshot shares the template's eight chunks and changes one of them.
  for (int i = 0; i < 8; ++i) writeAt(first + "/disk.img", static_cast<uint64_t>(i) * kMiB, randomBytes(kMiB, 100 + i));
  std::filesystem::copy_file(first + "/disk.img", second + "/disk.img");
  writeAt(second + "/disk.img", 5 * kMiB, randomBytes(kMiB, 999));

  ExportOptions options;
  options.chunk_store_dir = store;
  auto a = exportSnapshot(first, tmp / "first.spacearc", key, options);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->chunks_sealed, 8u);
  EXPECT_EQ(a->chunks_from_store, 0u);
  auto b = exportSnapshot(second, tmp / "second.spacearc", key, options);
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->chunks_sealed, 1u);
  EXPECT_EQ(b->chunks_from_store, 7u);
  size_t stored = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(store)) stored += e.is_regular_file();
  EXPECT_EQ(stored, 9u);

  // Both archives are self-contained: they import with no store.
  ASSERT_TRUE(importSnapshot(tmp / "second.spacearc", tmp / "restored", *kek));
  EXPECT_TRUE(sameContent(second + "/disk.img", tmp / "restored/disk.img"));

  // A thin archive holds only the chunk the store lacked; it imports only with the store.
  writeAt(second + "/disk.img", 6 * kMiB, randomBytes(kMiB, 1234));
  options.thin = true;
  auto thin = exportSnapshot(second, tmp / "thin.spacearc", key, options);
  ASSERT_TRUE(thin) << thin.error().message;
  EXPECT_EQ(thin->chunks_left_out, 7u);
  EXPECT_LT(thin->archive_bytes, 2 * kMiB);
  expectImportsNothing(tmp / "thin.spacearc", *kek, "thin archive without its store");
  ImportOptions import_options;
  import_options.chunk_store_dir = store;
  ASSERT_TRUE(importSnapshot(tmp / "thin.spacearc", tmp / "restored-thin", *kek, import_options));
  EXPECT_TRUE(sameContent(second + "/disk.img", tmp / "restored-thin/disk.img"));
}

TEST_F(Archive, ADamagedStoredChunkIsSealedAgainNotCopied) {
  std::string store = tmp / "chunks";
  std::string dir = tmp / "snap";
  std::filesystem::create_directories(dir);
  writeFile(dir + "/f", randomBytes(kMiB, 5));
  ExportOptions options;
  options.chunk_store_dir = store;
  ASSERT_TRUE(exportSnapshot(dir, tmp / "one.spacearc", key, options));
  for (const auto& e : std::filesystem::recursive_directory_iterator(store))
    if (e.is_regular_file()) flipBit(e.path(), 40, 0);
  auto again = exportSnapshot(dir, tmp / "two.spacearc", key, options);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->chunks_sealed, 1u);
  ASSERT_TRUE(importSnapshot(tmp / "two.spacearc", tmp / "restored", *kek));
  // The damaged record was replaced: the next export reuses the store again.
  auto third = exportSnapshot(dir, tmp / "three.spacearc", key, options);
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_EQ(third->chunks_sealed, 0u);
  EXPECT_EQ(third->chunks_from_store, 1u);
}

TEST_F(Archive, WrongKeyImportsNothing) {
  ASSERT_TRUE(exportSmall(tmp / "a.spacearc"));
  auto other = testKek('x');
  expectImportsNothing(tmp / "a.spacearc", *other, "wrong KEK");
  auto imported = importSnapshot(tmp / "a.spacearc", tmp / "out/restored", *other);
  ASSERT_FALSE(imported);
  EXPECT_EQ(imported.error().kind, ErrorKind::kUnauthenticated);
  EXPECT_NE(imported.error().message.find("not wrapped by key"), std::string::npos) << imported.error().message;
}

// Every single-bit change anywhere in the file (lead, header, key block, chunks, tags, manifest,
// trailer) makes import fail and import nothing.
TEST_F(Archive, AFlippedBitAnywhereImportsNothing) {
  auto stats = exportSmall(tmp / "a.spacearc");
  ASSERT_TRUE(stats) << stats.error().message;
  std::string original = readFile(tmp / "a.spacearc");
  ASSERT_LT(original.size(), 64u * 1024) << "the archive should be small enough to try every byte";
  std::cout << "trying every byte of a " << original.size() << "-byte archive\n";
  std::filesystem::create_directories(tmp / "out");
  for (size_t i = 0; i < original.size(); ++i) {
    writeFile(tmp / "bad.spacearc", original, 0600);
    flipBit(tmp / "bad.spacearc", i, static_cast<int>(i % 8));
    auto imported = importSnapshot(tmp / "bad.spacearc", tmp / "out/restored", *kek);
    ASSERT_FALSE(imported) << "bit " << i % 8 << " of byte " << i << " of " << original.size() << " went unnoticed";
    ASSERT_EQ(listDir(tmp / "out").size(), 0u) << "byte " << i;
  }
}

TEST_F(Archive, NamedTamperingIsReportedClearly) {
  std::string dir = tmp / "snap";
  std::filesystem::create_directories(dir);
  writeFile(dir + "/one-chunk", textBytes(64 * 1024, 3));
  ExportOptions options;
  options.chunk_size = 64 * 1024;
  ASSERT_TRUE(exportSnapshot(dir, tmp / "a.spacearc", key, options));
  std::string original = readFile(tmp / "a.spacearc");
  // The trailer is in clear: body start and manifest offset locate the one chunk record.
  uint64_t trailer = original.size() - kTrailerBytes;
  uint64_t body = le64(original, trailer + 8), chunk_end = body + le64(original, trailer + 16);
  struct Case {
    const char* what;
    uint64_t offset;
    const char* expect;
  } cases[] = {
      {"header", kLeadBytes + 20, "does not authenticate"},
      {"chunk ciphertext", body + 20, "does not authenticate"},
      {"chunk tag", chunk_end - 3, "does not authenticate"},
      {"manifest", chunk_end + 30, "does not authenticate"},
  };
  for (const auto& c : cases) {
    writeFile(tmp / "bad.spacearc", original, 0600);
    flipBit(tmp / "bad.spacearc", c.offset, 1);
    auto imported = importSnapshot(tmp / "bad.spacearc", tmp / "restored", *kek);
    ASSERT_FALSE(imported) << c.what;
    // A flip in the header's random archive id may make it no hex at all: then parsing refuses it first.
    bool named = imported.error().message.find(c.expect) != std::string::npos ||
                 (std::string(c.what) == "header" && imported.error().message.find("malformed") != std::string::npos);
    EXPECT_TRUE(named) << c.what << ": " << imported.error().message;
    EXPECT_FALSE(std::filesystem::exists(tmp / "restored")) << c.what;
  }
}

TEST_F(Archive, ATruncatedFileImportsNothing) {
  ASSERT_TRUE(exportSmall(tmp / "a.spacearc"));
  std::string original = readFile(tmp / "a.spacearc");
  for (size_t keep : {size_t{0}, size_t{10}, size_t{kLeadBytes}, size_t{200}, original.size() / 2,
                      original.size() - kTrailerBytes, original.size() - 1}) {
    writeFile(tmp / "cut.spacearc", original.substr(0, keep), 0600);
    expectImportsNothing(tmp / "cut.spacearc", *kek, "kept " + std::to_string(keep));
  }
  writeFile(tmp / "long.spacearc", original + "x", 0600);
  expectImportsNothing(tmp / "long.spacearc", *kek, "one byte appended");
}

TEST_F(Archive, RotationRewrapsTheKeyAndLeavesTheDataAsItIs) {
  ASSERT_TRUE(exportSmall(tmp / "a.spacearc"));
  std::string before = readFile(tmp / "a.spacearc");
  auto next = testKek('n');
  auto rewrapped = rewrapArchive(tmp / "a.spacearc", *kek, *next);
  ASSERT_TRUE(rewrapped) << rewrapped.error().message;
  std::string after = readFile(tmp / "a.spacearc");
  // The chunks and the sealed manifest are the same bytes: only the key block changed.
  auto body = [](const std::string& file) {
    uint64_t start = le64(file, file.size() - kTrailerBytes + 8);
    return file.substr(start, file.size() - kTrailerBytes - start);
  };
  EXPECT_NE(before, after);
  EXPECT_EQ(body(before), body(after));

  auto info = inspectArchive(tmp / "a.spacearc");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->kek_ids, std::vector<std::string>{next->id()});
  expectImportsNothing(tmp / "a.spacearc", *kek, "old KEK after rotation");
  auto imported = importSnapshot(tmp / "a.spacearc", tmp / "restored", *next);
  ASSERT_TRUE(imported) << imported.error().message;
  expectSameTree(tmp / "snap", tmp / "restored");
  // Rotation needs the old key.
  auto third = testKek('t');
  EXPECT_FALSE(rewrapArchive(tmp / "a.spacearc", *kek, *third));
}

TEST_F(Archive, ImportsUnderACommandOrEnvironmentKek) {
  // A KEK from the environment, and a KMS-like command (a shell script wrapping with openssl).
  std::string hex_key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  setenv("SPACE_TEST_ARCHIVE_KEK", hex_key.c_str(), 1);
  auto env_kek = kekFromSpec("env:SPACE_TEST_ARCHIVE_KEK");
  ASSERT_TRUE(env_kek) << env_kek.error().message;
  auto env_key = newDataKey("acme", **env_kek);
  ASSERT_TRUE(env_key);
  std::string snap = smallSnapshot();
  ASSERT_TRUE(exportSnapshot(snap, tmp / "env.spacearc", *env_key));
  unsetenv("SPACE_TEST_ARCHIVE_KEK");
  auto from_file = kekFromBytes(*fromHex(hex_key));  // the same key brought another way opens it
  ASSERT_TRUE(importSnapshot(tmp / "env.spacearc", tmp / "restored-env", **from_file));
  expectSameTree(snap, tmp / "restored-env");

  if (std::system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl command not installed";
  writeFile(tmp / "kms.secret", "kms-secret", 0600);
  writeFile(tmp / "kms.sh",
            "#!/bin/sh\nset -eu\ncase \"$1\" in\n"
            "wrap) exec openssl enc -aes-256-cbc -pbkdf2 -salt -pass file:\"$(dirname \"$0\")/kms.secret\" ;;\n"
            "unwrap) exec openssl enc -d -aes-256-cbc -pbkdf2 -pass file:\"$(dirname \"$0\")/kms.secret\" ;;\n"
            "esac\n",
            0700);
  auto cmd_kek = kekFromSpec("command:kms:acme=" + tmp / "kms.sh");
  ASSERT_TRUE(cmd_kek) << cmd_kek.error().message;
  EXPECT_EQ((*cmd_kek)->id(), "kms:acme");
  auto cmd_key = newDataKey("acme", **cmd_kek);
  ASSERT_TRUE(cmd_key) << cmd_key.error().message;
  ASSERT_TRUE(exportSnapshot(snap, tmp / "kms.spacearc", *cmd_key));
  auto imported = importSnapshot(tmp / "kms.spacearc", tmp / "restored-kms", **cmd_kek);
  ASSERT_TRUE(imported) << imported.error().message;
  expectSameTree(snap, tmp / "restored-kms");
  // Rotation from the command KEK to a local one, without the data being touched.
  ASSERT_TRUE(rewrapArchive(tmp / "kms.spacearc", **cmd_kek, *kek));
  auto rotated = importSnapshot(tmp / "kms.spacearc", tmp / "restored-rotated", *kek);
  EXPECT_TRUE(rotated) << rotated.error().message;
  expectImportsNothing(tmp / "kms.spacearc", **cmd_kek, "command KEK after rotation away from it");
}

TEST_F(Archive, EmptyDirectoryAndEmptyFilesRoundTrip) {
  std::string dir = tmp / "empty";
  std::filesystem::create_directories(dir);
  auto stats = exportSnapshot(dir, tmp / "e.spacearc", key);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->files, 0u);
  ASSERT_TRUE(importSnapshot(tmp / "e.spacearc", tmp / "restored", *kek));
  EXPECT_TRUE(std::filesystem::is_directory(tmp / "restored"));
  EXPECT_TRUE(listDir(tmp / "restored").empty());

  writeFile(dir + "/zero-length", "");
  makeSparse(dir + "/all-hole", 3 * kMiB + 5);
  ASSERT_TRUE(exportSnapshot(dir, tmp / "e2.spacearc", key));
  ASSERT_TRUE(importSnapshot(tmp / "e2.spacearc", tmp / "restored2", *kek));
  expectSameTree(dir, tmp / "restored2");
}

TEST_F(Archive, RefusesWhatIsNotASnapshotAndAnExistingDestination) {
  std::string dir = smallSnapshot();
  std::filesystem::create_symlink("/etc/passwd", dir + "/link");
  auto refused = exportSnapshot(dir, tmp / "a.spacearc", key);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("neither a regular file"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(std::filesystem::exists(tmp / "a.spacearc"));
  std::filesystem::remove(dir + "/link");

  ASSERT_TRUE(exportSnapshot(dir, tmp / "a.spacearc", key));
  std::filesystem::create_directories(tmp / "taken");
  auto imported = importSnapshot(tmp / "a.spacearc", tmp / "taken", *kek);
  ASSERT_FALSE(imported);
  EXPECT_EQ(imported.error().kind, ErrorKind::kConflict);
  EXPECT_TRUE(listDir(tmp / "taken").empty());
}

TEST_F(Archive, ExportsAndImportsAFileLargerThanMemoryBoundsAllow) {
  // 192 MiB of incompressible data; export and import each run in a child whose peak RSS growth must stay
  // far below the file's size (one chunk and its sealed record at a time, plus the manifest).
  std::string dir = tmp / "snap";
  std::filesystem::create_directories(dir);
  constexpr int kChunks = 192;
  for (int i = 0; i < kChunks; ++i)
    writeAt(dir + "/memory", static_cast<uint64_t>(i) * kMiB, randomBytes(kMiB, 5000 + i));

  auto inChild = [&](auto fn) {
    pid_t pid = fork();
    if (pid == 0) {
      struct rusage before;
      getrusage(RUSAGE_SELF, &before);
      bool ok = fn();
      struct rusage after;
      getrusage(RUSAGE_SELF, &after);
      long grown_kib = after.ru_maxrss - before.ru_maxrss;
      fprintf(stderr, "peak RSS growth %ld KiB\n", grown_kib);
      _exit(!ok ? 1 : grown_kib > 48 * 1024 ? 2 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  };
  EXPECT_EQ(inChild([&] { return bool(exportSnapshot(dir, tmp / "big.spacearc", key)); }), 0);
  EXPECT_EQ(inChild([&] { return bool(importSnapshot(tmp / "big.spacearc", tmp / "restored", *kek)); }), 0);
  EXPECT_TRUE(sameContent(dir + "/memory", tmp / "restored/memory"));
}

TEST_F(Archive, AKilledExportLeavesNoPartialArchive) {
  // The kill lands wherever the export happens to be; whatever it hits, the final name holds either
  // nothing or a complete archive, and nothing else is left in the directory.
  std::string dir = tmp / "snap";
  std::filesystem::create_directories(dir);
  for (int i = 0; i < 48; ++i) writeAt(dir + "/memory", static_cast<uint64_t>(i) * kMiB, randomBytes(kMiB, 77 + i));
  std::filesystem::create_directories(tmp / "archives");
  std::string out = tmp / "archives/snap.spacearc";
  int killed_before_done = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    pid_t pid = fork();
    if (pid == 0) _exit(exportSnapshot(dir, out, key) ? 0 : 1);
    usleep(static_cast<useconds_t>(20000 + attempt * 60000));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    auto names = listDir(tmp / "archives");
    if (names.empty()) {
      ++killed_before_done;
      continue;
    }
    ASSERT_EQ(names, std::vector<std::string>{"snap.spacearc"});
    ASSERT_TRUE(importSnapshot(out, tmp / ("restored" + std::to_string(attempt)), *kek))
        << "a partial archive under the final name";
    std::filesystem::remove(out);
  }
  std::cout << killed_before_done << " of 4 exports were killed before they finished\n";
}

TEST_F(Archive, SealedFilesEncryptVmMemoryAtRest) {
  std::string memory = tmp / "memory";
  makeSparse(memory, 256 * kMiB);
  writeAt(memory, 0, randomBytes(2 * kMiB, 1));
  writeAt(memory, 200 * kMiB, textBytes(3 * kMiB, 2));
  auto sealed = sealFile(memory, tmp / "memory.sealed", key);
  ASSERT_TRUE(sealed) << sealed.error().message;
  EXPECT_LT(fileSize(tmp / "memory.sealed"), 3 * kMiB);
  EXPECT_EQ(readFile(tmp / "memory.sealed").find("snapshot line"), std::string::npos);

  auto opened = openSealedFile(tmp / "memory.sealed", tmp / "memory.open", *kek);
  ASSERT_TRUE(opened) << opened.error().message;
  EXPECT_TRUE(sameContent(memory, tmp / "memory.open"));
  EXPECT_LT(allocatedBytes(tmp / "memory.open"), 8 * kMiB);

  // A sealed file is not a snapshot archive, and the other way round; a tampered one opens nothing.
  EXPECT_FALSE(importSnapshot(tmp / "memory.sealed", tmp / "as-snapshot", *kek));
  ASSERT_TRUE(exportSmall(tmp / "snap.spacearc"));
  EXPECT_FALSE(openSealedFile(tmp / "snap.spacearc", tmp / "as-file", *kek));
  flipBit(tmp / "memory.sealed", fileSize(tmp / "memory.sealed") / 2, 4);
  EXPECT_FALSE(openSealedFile(tmp / "memory.sealed", tmp / "tampered.open", *kek));
  EXPECT_FALSE(std::filesystem::exists(tmp / "tampered.open"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "as-file"));
}

}  // namespace
}  // namespace space::archive

// A template's root filesystem uploaded as a tar stream (PUT /v1/templates/{name}/archive): read with
// libarchive (plain, gzip, zstd, xz or bzip2), vetted entry by entry, and rewritten as a plain pax tar
// into a spool file that the template builder then extracts like a tarball on the daemon's host. The
// uploader is not trusted with the host: whatever the archive holds, nothing may land outside the tree.
//
// Refused, with the entry's name (400): absolute names and ".." components, in member names and in
// hard-link targets; any member or hard-link target whose path goes through a symlink the archive made
// (a link `etc -> /etc` followed by `etc/passwd`). Not made: character and block devices (a sandbox's /dev
// is SPACE's own; a device node elsewhere in the tree would be a door to the host's hardware), counted and
// listed. Kept: directories, files, symlinks (their targets are the tree's business: the runtime resolves
// them inside the sandbox), hard links, fifos, owners, modes, user.* xattrs and POSIX ACLs; other xattr
// namespaces (trusted.*, security.*) are the host's and are dropped. The content (data plus 512 bytes a
// member) is capped at limit_bytes (kResourceExhausted: the route answers 413).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/tree_archive.h"
#include "common/result.h"

namespace space::api {

struct UploadSummary {
  uint64_t entries = 0;
  uint64_t bytes = 0;  // of file data
  uint64_t devices_skipped = 0;
  std::vector<std::string> devices;  // the first few skipped device names
  uint64_t xattrs_dropped = 0;
};

// Reads the upload from source and writes the vetted tar to out_fd.
Result<UploadSummary> spoolTemplateUpload(const TarSource& source, int out_fd, uint64_t limit_bytes);

// What the summary means for the template's user (the answer's "warnings").
std::vector<std::string> uploadWarnings(const UploadSummary& summary);

}  // namespace space::api

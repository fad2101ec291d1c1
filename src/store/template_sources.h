// Filling a template tree from each kind of source. Each function writes only below `rootfs`, an empty
// directory the caller created and removes again on failure.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "store/templates.h"

namespace space::store {

// debootstrap --variant=<variant> --include=<packages> <suite> <rootfs> [mirror], output streamed to progress.
Status populateFromDebootstrap(const TemplateBuildSpec& spec, const std::string& rootfs, const ProgressFn& progress);

// A copy of a host directory that keeps owners, modes, symlinks, hard links and extended attributes.
Status populateFromDir(const std::string& source_dir, const std::string& rootfs, const ProgressFn& progress);

// Extracts a rootfs tarball (compression detected by GNU tar) with numeric owners and modes. Refuses archives
// with absolute member names or ".." components before extracting anything.
Status populateFromTar(const std::string& tarball, const std::string& rootfs, const ProgressFn& progress);

// Creates the mount points and directories every sandbox expects (proc, sys, dev, run, tmp 1777, root, etc)
// when missing. Refuses a tree where one of them is a symlink or not a directory: the runtime mounts onto
// these paths, and a symlink there could point a mount outside the sandbox's root.
Status addSandboxDirectories(const std::string& rootfs);

// Writes the template's own /etc/hostname ("sandbox"; every sandbox's kernel hostname is its id): a
// debootstrap tree carries the build host's (SECURITY.md J27). The same for every template, so that
// identical trees stay one copy. A tree whose /etc is not a directory is left as it is.
inline constexpr const char* kTemplateHostname = "sandbox";
Status writeTemplateHostname(const std::string& rootfs);

// What sandboxes of the tree will not be able to do, one sentence each with the way out: said when the
// template is built rather than at its first failing exec. A tree without an executable /bin/sh (symlinks
// followed inside the tree only) is allowed, since argv execs need no shell (distroless images), but
// every shell exec will fail.
std::vector<std::string> templateWarnings(const std::string& rootfs);

}  // namespace space::store

// LayerDisk: the disk quota of a sandbox's writable layer. Each sandbox gets its own sparse ext4 image
// of exactly limits.disk_bytes with limits.disk_inodes inodes (on the layer volume, runtime/jail/
// layer_volume.h, so it can be cloned for snapshots), loop-mounted at <dir>/disk and holding the
// overlay's upper/ and work/. A sandbox that fills its disk, or its inode table with
// millions of empty files, gets ENOSPC inside; the host disk is unaffected beyond the image's size (J18).
// Why not one XFS volume with project quotas: docs/decisions/0002-jail-containment.md (the kernel SPACE
// runs on here has no quota support at all).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace space::jail {

// Creates <dir> (0711), the image at `image`, the ext4 filesystem in it (root directory owned by `owner`),
// mounts it at <dir>/disk, and creates upper/ and work/ in it owned by `owner`, plus the mount points
// lower/ and rootfs/ next to it.
// device: set to the loop device's "major:minor" (its write counters: JailRuntime::writeGeneration).
Status createLayerDisk(const std::string& dir, const std::string& image, uint64_t bytes, uint64_t inodes,
                       uint32_t owner, std::string* device = nullptr);

// A layer cloned from another sandbox's (a fork): files of the source's uid range [from_base, +count)
// move to [to_base, +count). Metadata only (data blocks stay shared); the walk costs per file.
Status shiftLayerOwners(const std::string& dir, uint32_t from_base, uint32_t to_base, uint32_t count);

// The same around an existing image (a clone of a snapshot's): creates <dir>, mounts `image` at <dir>/disk
// and the mount points. The image keeps its own size and inode count.
Status mountLayerDisk(const std::string& dir, const std::string& image, std::string* device = nullptr);

// Detaches every host mount under <dir> and removes the directory and `image`. Idempotent. The image's
// blocks are freed once the sandbox's own mount namespace (which still holds the overlay) is gone.
Status removeLayerDisk(const std::string& dir, const std::string& image);

// Bytes the image occupies on the host disk (allocated blocks of the sparse file).
Result<uint64_t> layerDiskUsage(const std::string& image);

}  // namespace space::jail

// LayerDisk: the disk quota of a sandbox's writable layer. Each sandbox gets its own sparse ext4 image
// <dir>/disk.img of exactly limits.disk_bytes with limits.disk_inodes inodes, loop-mounted at <dir>/disk
// and holding the overlay's upper/ and work/. A sandbox that fills its disk, or its inode table with
// millions of empty files, gets ENOSPC inside; the host disk is unaffected beyond the image's size (J18).
// Why not one XFS volume with project quotas: docs/decisions/0002-jail-containment.md (the kernel SPACE
// runs on here has no quota support at all).
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace space::jail {

// Creates <dir> (0711), the image, the ext4 filesystem in it (root directory owned by `owner`), mounts it
// at <dir>/disk, and creates upper/ and work/ in it owned by `owner`, plus the mount points lower/ and
// rootfs/ next to it.
Status createLayerDisk(const std::string& dir, uint64_t bytes, uint64_t inodes, uint32_t owner);

// Detaches every host mount under <dir> and removes the directory with the image. Idempotent. The image's
// blocks are freed once the sandbox's own mount namespace (which still holds the overlay) is gone.
Status removeLayerDisk(const std::string& dir);

// Bytes the image occupies on the host disk (allocated blocks of the sparse file).
Result<uint64_t> layerDiskUsage(const std::string& dir);

}  // namespace space::jail

// LayerVolume: the filesystem that holds every jail sandbox's writable-layer image and every snapshot of
// one. It must share blocks between files (reflink, FICLONE): a snapshot, a rollback and a fork are then
// a clone of the layer image, whose cost depends on the image's extent count, not on how much data the
// sandbox wrote. Where the state directory's own filesystem can (XFS, btrfs) it is used directly;
// elsewhere (ext4, as on SPACE's own machine) SPACE keeps an XFS filesystem in a sparse image,
// <state>/volume.img, loop-mounted at <state>/volume and made once. Layout inside:
//   layers/<sandbox-id>.img       a live sandbox's writable layer (runtime/jail/layer_disk.h)
//   snapshots/<snapshot-id>/      one snapshot: disk.img (read-only clone) + snapshot.json
// Rationale: docs/decisions/0006-snapshots.md.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace space::host {

struct LayerVolume {
  std::string root;        // directory holding layers/ and snapshots/
  bool own_mount = false;  // root is SPACE's loop-mounted XFS image
  std::string layersDir() const { return root + "/layers"; }
  std::string snapshotsDir() const { return root + "/snapshots"; }
  std::string reservePath() const { return root + "/layer-volume.reserve"; }
};

// Ballast: a file of kVolumeReserveBytes allocated blocks on the volume. A full volume fails snapshots and
// forks, but a rollback is how a sandbox gets out of a full disk: its clone may use the ballast's space
// (releaseVolumeReserve), and the ballast is made again once there is room (ensureVolumeReserve: only
// when at least twice its size is free; best effort).
inline constexpr uint64_t kVolumeReserveBytes = 32ull << 20;
void ensureVolumeReserve(const LayerVolume& v);
bool releaseVolumeReserve(const LayerVolume& v);  // true if there was one

// Finds or makes the volume for state_dir: the state dir itself when it can reflink, else
// <state>/volume.img (sparse, `bytes`, XFS with reflink) mounted at <state>/volume (mounted already:
// reused). Creates layers/ and snapshots/.
Result<LayerVolume> openLayerVolume(const std::string& state_dir, uint64_t bytes);

// Unmounts SPACE's own volume of state_dir if it is mounted and nothing uses it (EBUSY: left mounted).
// For an orderly shutdown with no sandbox left, and for tests.
Status closeLayerVolume(const std::string& state_dir);

// Whether files in `dir` can share blocks (FICLONE between two files there succeeds).
bool canReflink(const std::string& dir);

// dst := a block-sharing copy of src (FICLONE): created exclusively with `mode`, fsync'd when `durable`.
// dst's directory is not synced (the caller renames into place and syncs that). Fails if dst exists.
// Not durable is for clones whose loss in a host crash leaves the previous state (a rollback's next
// layer, a new sandbox's layer): an fsync through the loop device costs milliseconds.
Status cloneFile(const std::string& src, const std::string& dst, unsigned mode = 0600, bool durable = true);

// fsync of a directory (after a rename into it).
Status syncDir(const std::string& dir);

}  // namespace space::host

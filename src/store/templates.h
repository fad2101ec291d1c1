// Templates: immutable, content-addressed root filesystem trees that sandboxes start from.
//
// Layout under the state directory:
//   templates/tmp-<random>/rootfs   a build in progress (removed if the build fails, or at start-up)
//   templates/<sha256 hex>/rootfs   a finished tree, never written again; shared by every template name
//                                   and sandbox whose content hashes the same
//
// A build fills a temporary tree, adds the directories every sandbox needs, hashes it, and renames the whole
// temporary directory to its hash in one step, so a tree either exists complete under its hash or not at all.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace space::store {

// What to build. Mirrors core::BuildTemplate field for field; the store keeps its own type so that it does
// not depend on core (core depends on the store).
struct TemplateBuildSpec {
  std::string name;
  std::string kind;                   // "debootstrap" | "dir" | "tar" | "upload"
  std::string suite = "bookworm";     // debootstrap
  std::string variant = "minbase";    // debootstrap
  std::vector<std::string> packages;  // debootstrap --include
  std::string mirror;                 // debootstrap; empty = debootstrap's default (deb.debian.org)
  std::string path;                   // dir: a host directory; tar: a (possibly compressed) tarball;
                                      // upload: a tarball the API vetted and spooled (not recorded)
};

using ProgressFn = std::function<void(const std::string& line)>;

// [a-z0-9][a-z0-9._-]{0,62}: safe in paths, URLs and labels.
Status validateTemplateName(std::string_view name);

class TemplateBuilder {
 public:
  TemplateBuilder(std::string state_dir, Store& store);

  // Builds the tree, stores it under its content hash (reusing an identical existing tree) and records the
  // template under spec.name, replacing an earlier template of that name. Output of the build tools goes to
  // `progress` line by line as it appears. On failure nothing is left behind. The record's warnings say
  // what sandboxes of the tree will not be able to do (templateWarnings).
  Result<TemplateRecord> build(const TemplateBuildSpec& spec, const ProgressFn& progress);

  // Forgets the template name; deletes its tree when no other name shares it. kConflict while any sandbox
  // runs from that tree, kNotFound for an unknown name.
  Status remove(const std::string& name);

  // Deletes what a crash can leave behind: temporary trees of unfinished builds and removals, and trees no
  // template or sandbox refers to. Call once at start-up, before any build, after sandbox rows are loaded.
  Status removeInterruptedBuilds();

  const std::string& templatesDir() const { return templates_dir_; }

 private:
  Status populate(const TemplateBuildSpec& spec, const std::string& rootfs, const ProgressFn& progress);
  // Deletes the tree with this id if no template name and no sandbox refers to it. Caller holds mu_.
  Status dropTreeIfUnused(const std::string& template_id);

  std::string templates_dir_;  // absolute
  Store& store_;
  // Serialises the step from "tree exists" to "row written" against remove(), so a tree being reused
  // by a build is never deleted underneath it.
  std::mutex mu_;
};

}  // namespace space::store

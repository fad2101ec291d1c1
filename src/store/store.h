// Store: SQLite (WAL) metadata of one node. Every mutation is committed (and, with synchronous=FULL,
// on disk) before the call returns, so an acknowledged API call survives kill -9.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/sandbox_state.h"

namespace space::store {

struct TemplateRecord {
  std::string id;         // content hash of the tree ("sha256:…")
  std::string name;       // unique, user-facing
  std::string rootfs;     // absolute path of the read-only tree
  nlohmann::json source;  // {"kind":"debootstrap","suite":"bookworm","packages":[…]} etc.
  uint64_t size_bytes = 0;
  int64_t created_ms = 0;
  // Not stored: what the build found sandboxes of this tree will not be able to do (templateWarnings).
  std::vector<std::string> warnings;
};

struct SandboxRecord {
  std::string id;
  std::string template_name;
  std::string template_id;
  SandboxState state = SandboxState::kStarting;
  std::string runtime;  // "jail" | "vm"
  nlohmann::json spec;  // limits, env, timeout: what create asked for
  std::map<std::string, std::string> labels;
  int uid_slot = -1;  // index of the private uid range; unique among live sandboxes
  int64_t created_ms = 0;
  int64_t expires_ms = 0;    // 0 = no TTL
  nlohmann::json persisted;  // runtime::PersistedInstance::state
  std::string error;         // why it failed
  bool pooled = false;       // true while it waits in the pool, not yet handed out
  // Paused for being idle (not by its owner): the next use wakes it. A qualifier of kPaused, not an
  // operation: nothing is in flight while it is set.
  bool auto_paused = false;
  PendingOperation pending;  // the multi-step operation in flight on it, if any
};

struct ApiKeyRecord {
  std::string id;  // "key-…", shown in lists
  std::string name;
  std::string prefix;  // first characters of the secret, to recognise it
  int64_t created_ms = 0;
  int64_t revoked_ms = 0;  // 0 = active
};

struct SecretRecord {
  std::string name;
  std::vector<std::string> hosts;
  std::string header = "Authorization";
  std::string format;
  std::vector<std::string> methods;        // empty: any
  std::vector<std::string> path_prefixes;  // empty: any
  std::string sealed_value;                // never the value itself (store/secret_box.h)
  int64_t created_ms = 0;
};

struct SnapshotRecord {
  std::string id;  // "snap-…"
  std::string sandbox_id;
  std::string name;
  std::string runtime;
  std::string kind;  // "filesystem" | "full"
  std::string path;
  uint64_t size_bytes = 0;
  std::string origin = "manual";
  int64_t created_ms = 0;
};

struct SandboxFilter {
  std::map<std::string, std::string> labels;  // all must match
  std::optional<SandboxState> state;
  bool include_pooled = false;
};

class Store {
 public:
  // Opens (creating if needed) state_dir/space.db and migrates the schema.
  static Result<std::unique_ptr<Store>> open(const std::string& state_dir);
  virtual ~Store() = default;

  // Templates
  virtual Status putTemplate(const TemplateRecord& t) = 0;                  // replaces by name
  virtual Result<TemplateRecord> getTemplate(const std::string& name) = 0;  // kNotFound
  virtual Result<std::vector<TemplateRecord>> listTemplates() = 0;
  virtual Status deleteTemplate(const std::string& name) = 0;
  virtual Result<int> countSandboxesUsingTemplate(const std::string& template_id) = 0;
  // How many template names point at the tree with this content hash; the tree may go when this reaches 0.
  virtual Result<int> countTemplatesWithId(const std::string& template_id);

  // Sandboxes
  virtual Status insertSandbox(const SandboxRecord& s) = 0;  // kConflict on duplicate id / uid slot
  virtual Status updateSandbox(const SandboxRecord& s) = 0;
  virtual Result<SandboxRecord> getSandbox(const std::string& id) = 0;
  virtual Result<std::vector<SandboxRecord>> listSandboxes(const SandboxFilter& filter) = 0;
  virtual Status deleteSandbox(const std::string& id) = 0;
  // The lowest uid slot not held by any sandbox row.
  virtual Result<int> freeUidSlot() = 0;
  // Inserts the sandbox with the lowest free uid slot (ignoring s.uid_slot) and returns that slot. Unlike
  // freeUidSlot() followed by insertSandbox(), two concurrent callers never race for the same slot.
  virtual Result<int> insertSandboxWithFreeUidSlot(const SandboxRecord& s);

  // API keys: the secret is shown once at creation and stored only as a hash.
  virtual Result<std::pair<ApiKeyRecord, std::string>> createApiKey(const std::string& name) = 0;
  virtual Result<std::vector<ApiKeyRecord>> listApiKeys() = 0;
  virtual Status revokeApiKey(const std::string& id_or_name) = 0;
  // Deletes the rows of keys revoked at or before revoked_before_ms (a purged key stays refused: its
  // digest is simply unknown then). Returns how many.
  virtual Result<size_t> purgeRevokedApiKeys(int64_t revoked_before_ms) = 0;
  virtual Result<ApiKeyRecord> verifyApiKey(const std::string& secret) = 0;  // kUnauthenticated

  // Secrets of the egress gateway (sealed values only).
  virtual Status putSecret(const SecretRecord& s);                  // replaces by name
  virtual Result<SecretRecord> getSecret(const std::string& name);  // kNotFound
  virtual Result<std::vector<SecretRecord>> listSecrets();
  virtual Status deleteSecret(const std::string& name);  // kNotFound

  // Snapshots
  virtual Status insertSnapshot(const SnapshotRecord& s);  // kConflict on a duplicate id or name of the sandbox
  virtual Result<SnapshotRecord> getSnapshot(const std::string& id);                         // kNotFound
  virtual Result<std::vector<SnapshotRecord>> listSnapshots(const std::string& sandbox_id);  // oldest first; "" = all
  virtual Status deleteSnapshot(const std::string& id);                                      // kNotFound
};

}  // namespace space::store

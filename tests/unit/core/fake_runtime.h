// A tier for the core services' tests: sandboxes are entries in a map (no processes, no agent), so that
// a service can be driven against a real store without namespaces or QEMU.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/context.h"
#include "runtime/registry.h"
#include "runtime/runtime.h"
#include "store/store.h"

namespace space::core::testing {

class FakeRuntime : public runtime::Runtime {
 public:
  explicit FakeRuntime(std::string name = "jail") : name_(std::move(name)) {}

  std::string name() const override { return name_; }
  runtime::Capabilities capabilities() const override { return caps; }
  Result<runtime::Instance> start(const runtime::SandboxSpec& spec) override {
    if (fail_starts) return makeError(ErrorKind::kInternal, "fake start refused");
    ++starts;
    runtime::Instance inst;
    inst.id = spec.id;
    inst.persisted = {spec.id, name_, {{"dir", spec.dir}}};
    running.insert(spec.id);
    return inst;
  }
  bool alive(const runtime::Instance& inst) override { return running.count(inst.id) > 0; }
  Status handOver(runtime::Instance&, const runtime::HandOver&) override { return ok(); }
  Status pause(runtime::Instance& inst) override {
    paused.insert(inst.id);
    return ok();
  }
  Status resume(runtime::Instance& inst) override {
    paused.erase(inst.id);
    return ok();
  }
  Result<runtime::SnapshotRef> snapshot(runtime::Instance& inst, runtime::SnapshotKind) override {
    return makeError(ErrorKind::kUnsupported, "fake snapshots");
  }
  Result<runtime::Instance> restore(const runtime::SnapshotRef&, const runtime::SandboxSpec& spec) override {
    return start(spec);
  }
  Status destroy(const runtime::PersistedInstance& inst) override {
    running.erase(inst.id);
    destroyed.insert(inst.id);
    return ok();
  }
  Result<runtime::Instance> reattach(const runtime::PersistedInstance& p) override {
    if (!running.count(p.id)) return makeError(ErrorKind::kNotFound, "fake: {} is gone", p.id);
    runtime::Instance inst;
    inst.id = p.id;
    inst.persisted = p;
    return inst;
  }
  Result<runtime::Usage> usage(const runtime::PersistedInstance&) override { return runtime::Usage{}; }

  runtime::Capabilities caps;
  bool fail_starts = false;
  int starts = 0;
  std::set<std::string> running;
  std::set<std::string> paused;
  std::set<std::string> destroyed;

 private:
  std::string name_;
};

// A state directory in /tmp with a real store and a registry holding one fake jail tier; removed at the end.
// Members are made in declaration order, so that ctx refers to a store that is open.
struct FakeNode {
  ~FakeNode() {
    store.reset();
    std::filesystem::remove_all(dir);
  }

  static std::string makeDir() {
    char tmpl[] = "/tmp/space-core-test-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    return tmpl;
  }
  static DaemonConfig configFor(const std::string& dir) {
    DaemonConfig c;
    c.state_dir = dir;
    return c;
  }
  static std::unique_ptr<store::Store> openStore(const std::string& dir) {
    auto s = store::Store::open(dir);
    if (!s) throw std::runtime_error(s.error().message);
    return std::move(*s);
  }
  static FakeRuntime* addJail(runtime::Registry& runtimes) {
    auto rt = std::make_unique<FakeRuntime>();
    FakeRuntime* jail = rt.get();
    runtimes.add(std::move(rt));
    return jail;
  }

  std::string dir = makeDir();
  DaemonConfig config = configFor(dir);
  std::unique_ptr<store::Store> store = openStore(dir);
  runtime::Registry runtimes;
  FakeRuntime* jail = addJail(runtimes);
  Context ctx{config, *store, runtimes};
};

}  // namespace space::core::testing

#include "runtime/vm/qmp.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/vm/confine.h"
#include "runtime/vm/inside/vm_init.h"
#include "runtime/vm/launch.h"

namespace space::vm {
namespace {

using nlohmann::json;

TEST(QmpDecoder, SplitsLinesAcrossFeeds) {
  QmpDecoder d;
  d.feed(R"({"QMP": {"version": {}, "capabilities": []}})"
         "\r\n"
         R"({"return": {}, "id")");
  auto a = d.next();
  ASSERT_TRUE(a && *a);
  EXPECT_EQ(classifyQmp(**a), QmpKind::kGreeting);
  auto b = d.next();
  ASSERT_TRUE(b);
  EXPECT_FALSE(*b);  // incomplete
  d.feed(
      ": 1}\r\n\r\n"
      R"({"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}})"
      "\n");
  auto c = d.next();
  ASSERT_TRUE(c && *c);
  EXPECT_EQ(classifyQmp(**c), QmpKind::kReturn);
  EXPECT_EQ((**c)["id"], 1);
  auto e = d.next();
  ASSERT_TRUE(e && *e);
  EXPECT_EQ(classifyQmp(**e), QmpKind::kEvent);
  auto none = d.next();
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

TEST(QmpDecoder, RejectsGarbageAndArraysAndOverlongLines) {
  QmpDecoder d;
  d.feed("not json\n");
  EXPECT_FALSE(d.next());
  QmpDecoder arr;
  arr.feed("[1,2]\n");
  EXPECT_FALSE(arr.next());
  QmpDecoder big;
  big.feed(std::string(kQmpMaxLine + 1, 'x'));
  EXPECT_FALSE(big.next());
}

TEST(QmpReply, ReturnAndErrorBecomeResults) {
  auto r = qmpReplyResult(json::parse(R"({"return": {"status": "running"}, "id": 3})"));
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["status"], "running");
  auto e = qmpReplyResult(json::parse(R"({"error": {"class": "CommandNotFound", "desc": "nope"}})"));
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(e.error().message.find("nope"), std::string::npos);
  auto odd = qmpReplyResult(json::parse(R"({"error": 5})"));
  ASSERT_FALSE(odd);  // malformed error objects are answered, not asserted on
  EXPECT_FALSE(qmpReplyResult(json::parse(R"({"hello": 1})")));
}

TEST(QmpReply, CommandEncoding) {
  std::string line = encodeQmpCommand("migrate", {{"uri", "exec:cat > state"}}, 7);
  ASSERT_EQ(line.back(), '\n');
  json j = json::parse(line);
  EXPECT_EQ(j["execute"], "migrate");
  EXPECT_EQ(j["id"], 7);
  EXPECT_EQ(j["arguments"]["uri"], "exec:cat > state");
  EXPECT_FALSE(json::parse(encodeQmpCommand("stop", nullptr, 1)).contains("arguments"));
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
size_t indexOf(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

TEST(QemuArgv, MicrovmWithSerialAgentPortAndQmp) {
  QemuSpec s;
  s.kernel = "/k";
  s.initrd = "/i";
  s.dir = "/vm";
  s.vcpus = 2;
  s.memory_mib = 256;
  s.disks = {{"/base.img", "raw", true}};
  auto a = buildQemuArgv(s);
  EXPECT_EQ(a[indexOf(a, "-machine") + 1], "microvm,rtc=on");
  EXPECT_EQ(a[indexOf(a, "-accel") + 1], "tcg");
  EXPECT_EQ(a[indexOf(a, "-m") + 1], "256M");
  EXPECT_EQ(a[indexOf(a, "-smp") + 1], "2");
  EXPECT_TRUE(has(a, "-nodefaults") && has(a, "-no-user-config") && has(a, "-no-reboot"));
  EXPECT_TRUE(has(a, "socket,id=agent,path=/vm/agent.sock,server=on,wait=off"));
  EXPECT_TRUE(has(a, "virtserialport,chardev=agent,name=space.agent"));
  EXPECT_TRUE(has(a, "unix:/vm/qmp.sock,server=on,wait=off"));
  EXPECT_TRUE(has(a, "id=disk0,file=/base.img,format=raw,if=none,cache=unsafe,read-only=on"));
  EXPECT_NE(a[indexOf(a, "-append") + 1].find("rdinit=/sbin/space-agent --vm-init"), std::string::npos);
  EXPECT_FALSE(has(a, "-incoming"));
}

TEST(QemuArgv, FileBackedMemoryAndDeferredIncoming) {
  QemuSpec s;
  s.kernel = "/k";
  s.initrd = "/i";
  s.dir = "/vm";
  s.accel = Accel::kKvm;
  s.memory_file = "/tpl/mem";
  s.incoming_defer = true;
  auto a = buildQemuArgv(s);
  EXPECT_EQ(a[indexOf(a, "-machine") + 1], "microvm,rtc=on,memory-backend=mem");
  EXPECT_TRUE(has(a, "memory-backend-file,id=mem,size=256M,mem-path=/tpl/mem,share=off"));
  EXPECT_EQ(a[indexOf(a, "-accel") + 1], "kvm");
  EXPECT_EQ(a[indexOf(a, "-incoming") + 1], "defer");
}

TEST(QemuArgv, RestoredVmHasNoInitrdABoundedConsoleAndASizedTranslationCache) {
  QemuSpec s;
  s.kernel = "/tpl/kernel.stub";
  s.dir = "/vm";
  s.tcg_tb_cache_mib = 128;
  auto a = buildQemuArgv(s);
  EXPECT_FALSE(has(a, "-initrd"));
  EXPECT_EQ(a[indexOf(a, "-kernel") + 1], "/tpl/kernel.stub");
  EXPECT_EQ(a[indexOf(a, "-accel") + 1], "tcg,tb-size=128");
  EXPECT_EQ(a[indexOf(a, "-chardev") + 1], "ringbuf,id=console,size=65536");
  s.console_file = "/vm/console.log";
  a = buildQemuArgv(s);
  EXPECT_EQ(a[indexOf(a, "-chardev") + 1], "file,id=console,path=/vm/console.log");
}

TEST(QemuArgv, OneNicAfterTheDisksOnAHubOrTheSandboxTap) {
  QemuSpec s;
  s.kernel = "/k";
  s.dir = "/vm";
  s.disks = {{"/d.qcow2", "qcow2", false}};
  auto a = buildQemuArgv(s);
  // Without a tap (template warm-up, no egress) the NIC exists but hangs off an empty hub.
  EXPECT_EQ(a[indexOf(a, "-netdev") + 1], "hubport,id=net0,hubid=0");
  EXPECT_EQ(std::count(a.begin(), a.end(), "-netdev"), 1);
  EXPECT_GT(indexOf(a, "virtio-net-device,netdev=net0"), indexOf(a, "virtio-blk-device,drive=disk0"));
  s.tap_fd = 4;
  s.mac = "52:54:00:0a:c8:00";
  a = buildQemuArgv(s);
  EXPECT_EQ(a[indexOf(a, "-netdev") + 1], "tap,id=net0,fd=4");
  EXPECT_TRUE(has(a, "virtio-net-device,netdev=net0,mac=52:54:00:0a:c8:00"));
}

TEST(VmmRoot, PlanBindsRealPathsWithEveryParentAndTheDevices) {
  char tmpl[] = "/tmp/space-vmmroot-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  ASSERT_EQ(mkdir((dir + "/real").c_str(), 0755), 0);
  { std::ofstream(dir + "/real/kernel") << "k"; }
  ASSERT_EQ(symlink("real/kernel", (dir + "/link").c_str()), 0);
  VmmJail jail;
  jail.uid = jail.gid = 12345;
  jail.root_dir = "/R";
  jail.read_only = {dir + "/link"};
  jail.writable = {dir + "/real"};
  jail.devices = {"/dev/null"};
  auto plan = planVmmRoot(jail);
  ASSERT_TRUE(plan) << plan.error().message;
  auto find = [&](MountStep::Kind k, const std::string& b) {
    for (auto& s : *plan)
      if (s.kind == k && (s.b == b || (s.b.empty() && s.a == b))) return true;
    return false;
  };
  // The symlink is resolved: the file is bound where its real path is, read-only.
  EXPECT_TRUE(find(MountStep::kTouch, "/R" + dir + "/real/kernel"));
  EXPECT_TRUE(find(MountStep::kBindReadOnly, "/R" + dir + "/real/kernel"));
  EXPECT_TRUE(find(MountStep::kBind, "/R" + dir + "/real"));
  EXPECT_TRUE(find(MountStep::kMkdir, "/R/tmp"));
  EXPECT_TRUE(find(MountStep::kBindReadOnly, "/R/usr"));
  EXPECT_TRUE(find(MountStep::kBindReadOnly, "/R/dev/null"));
  EXPECT_TRUE(find(MountStep::kMkdir, "/R/proc"));
  // Parents come before children.
  size_t parent = 0, child = 0;
  for (size_t i = 0; i < plan->size(); ++i) {
    if ((*plan)[i].kind == MountStep::kMkdir && (*plan)[i].a == "/R/tmp") parent = i;
    if ((*plan)[i].kind == MountStep::kMkdir && (*plan)[i].a == "/R" + dir) child = i;
  }
  EXPECT_LT(parent, child);
  VmmJail root_uid = jail;
  root_uid.uid = 0;
  QemuSpec spec;
  spec.dir = dir;
  EXPECT_FALSE(launchConfinedQemu(spec, root_uid)) << "a VMM must never run as root";
  std::filesystem::remove_all(dir);
}

TEST(VmInit, ModuleListSkipsBlanksAndComments) {
  auto paths = parseModuleList("# order matters\n/lib/a.ko\n\n  /lib/b.ko  \r\n#x\n");
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0], "/lib/a.ko");
  EXPECT_EQ(paths[1], "/lib/b.ko");
}

}  // namespace
}  // namespace space::vm

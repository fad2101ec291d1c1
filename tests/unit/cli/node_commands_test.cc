// space node's text: the tiers table, the KVM line, auto and egress; every "no" or "not used" carries its
// reason, and fields an older daemon leaves out read as not reported instead of failing.
#include <gtest/gtest.h>

#include "cli/commands.h"

namespace space::cli {
namespace {

using nlohmann::json;

json fullNode() {
  return json::parse(R"({
    "isolation": {
      "jail": {"available": true,
               "capabilities": {"pause": true, "snapshot_filesystem": true, "snapshot_memory": false,
                                "rollback": true, "fork": true}},
      "vm": {"available": true, "accel": "tcg",
             "capabilities": {"pause": true, "snapshot_filesystem": true, "snapshot_memory": true,
                              "rollback": true, "fork": true},
             "kvm": {"state": "failed", "usable": false, "mode": "auto",
                     "reason": "guest did not answer in 20 s under KVM", "checked_at": "2026-12-01T08:00:00Z",
                     "probe_ms": 20013, "cached": true}},
      "auto": "jail"},
    "egress": {"on": true}})");
}

TEST(NodeText, FullAnswer) {
  EXPECT_EQ(nodeText(fullNode()),
            "TIER  AVAILABLE  ACCEL  NOTES\n"
            "jail  yes        -      pause, snapshot, rollback, fork\n"
            "vm    yes        tcg    pause, snapshot, memory snapshot, rollback, fork\n"
            "kvm: not used: guest did not answer in 20 s under KVM (mode auto; probed 2026-12-01T08:00:00Z in "
            "20013 ms; cached result)\n"
            "auto isolation: jail\n"
            "egress: on\n");
}

TEST(NodeText, UnavailableTierAndEgressOffShowTheirReasons) {
  json node = fullNode();
  node["isolation"]["vm"] = {{"available", false}, {"reason", "no guest kernel at /var/cache/space/vm/vmlinuz"}};
  node["egress"] = {{"on", false}, {"reason", "nftables is not usable"}};
  std::string out = nodeText(node);
  EXPECT_NE(out.find("vm    no         -      no guest kernel at /var/cache/space/vm/vmlinuz\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("egress: off: nftables is not usable\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("kvm:"), std::string::npos) << out;
}

TEST(NodeText, KvmStates) {
  json node = fullNode();
  node["isolation"]["vm"]["accel"] = "kvm";
  node["isolation"]["vm"]["kvm"] = {{"state", "proven"}, {"mode", "auto"}, {"checked_at", "T"}, {"probe_ms", 900}};
  EXPECT_NE(nodeText(node).find("kvm: in use (mode auto; probed T in 900 ms)\n"), std::string::npos);
  node["isolation"]["vm"]["accel"] = "tcg";
  EXPECT_NE(nodeText(node).find("kvm: proven, but not used (mode auto; probed T in 900 ms)\n"), std::string::npos);
  node["isolation"]["vm"]["kvm"] = {{"state", "absent"}};
  EXPECT_NE(nodeText(node).find("kvm: not used: no usable /dev/kvm\n"), std::string::npos);
  node["isolation"]["vm"]["kvm"] = {{"state", "off"}, {"mode", "off"}};
  EXPECT_NE(nodeText(node).find("kvm: not used: turned off in the daemon's configuration (mode off)\n"),
            std::string::npos);
  node["isolation"]["vm"]["kvm"] = {{"state", "probing"}, {"mode", "auto"}};
  EXPECT_NE(nodeText(node).find("kvm: being probed (mode auto)\n"), std::string::npos);
}

TEST(NodeText, MissingAndMistypedFieldsReadAsNotReported) {
  // Today's daemon: no egress, no kvm.
  json node = json::parse(R"({"isolation": {"jail": {"available": true, "capabilities": {"pause": true}},
                                            "vm": {"available": "yes"}, "auto": "jail"}})");
  std::string out = nodeText(node);
  EXPECT_NE(out.find("jail  yes        -      pause\n"), std::string::npos) << out;
  EXPECT_NE(out.find("vm    ?          -      availability not reported by the daemon\n"), std::string::npos) << out;
  EXPECT_NE(out.find("egress: not reported by the daemon\n"), std::string::npos) << out;
  EXPECT_EQ(nodeText(json::object()),
            "isolation tiers: not reported by the daemon\n"
            "auto isolation: not reported by the daemon\n"
            "egress: not reported by the daemon\n");
  EXPECT_EQ(nodeText(json::array()), nodeText(json::object()));
}

TEST(NodeText, TiersAndCapabilitiesThisCliDoesNotKnow) {
  json node = fullNode();
  node["isolation"]["gvisor"] = {{"available", true}, {"capabilities", {{"live_migration", true}}}};
  node["isolation"]["jail"]["capabilities"]["checkpoint_restore"] = true;
  std::string out = nodeText(node);
  EXPECT_NE(out.find("gvisor  yes        -      live migration\n"), std::string::npos) << out;
  EXPECT_NE(out.find("pause, snapshot, rollback, fork, checkpoint restore\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace space::cli

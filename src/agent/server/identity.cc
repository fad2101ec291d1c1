// set_identity: what makes a restored or forked sandbox distinct from its template (hostname, extra
// environment, fresh RNG state, the current time) and, after a restore, its new generation (generation.cc).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>

#include "agent/protocol/message.h"
#include "agent/server/server.h"
#include "sys/rtnetlink.h"

namespace space::agent {
namespace {

constexpr size_t kMaxSeedBytes = 4096;

Result<std::string> decodeHex(const std::string& hex) {
  if (hex.size() % 2 != 0 || hex.size() / 2 > kMaxSeedBytes)
    return makeError(ErrorKind::kInvalidArgument, "rng_seed_hex must be an even number of hex digits, at most {} bytes",
                     kMaxSeedBytes);
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return makeError(ErrorKind::kInvalidArgument, "rng_seed_hex is not hex");
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

// Mixes the seed into the kernel's RNG. A plain write to /dev/urandom stirs the input pool but leaves
// the output generator's key alone until its next scheduled reseed, so two VMs restored from one
// memory snapshot would read the same bytes until then. Where the agent holds CAP_SYS_ADMIN over the
// kernel (PID 1 of a VM) it credits the seed (RNDADDENTROPY) and forces a reseed (RNDRESEEDCRNG) at
// once; inside a jail those ioctls fail with EPERM and the write alone is what the sandbox gets (a
// jail shares the host kernel's RNG, which was never cloned).
Status mixIntoRng(const std::string& seed, bool* reseeded) {
  *reseeded = false;
  UniqueFd fd(open("/dev/urandom", O_WRONLY | O_CLOEXEC));
  if (!fd) return sysError(errno, "open /dev/urandom");
  if (write(fd.get(), seed.data(), seed.size()) != static_cast<ssize_t>(seed.size()))
    return sysError(errno, "write /dev/urandom");
  std::vector<char> buf(sizeof(rand_pool_info) + seed.size());
  auto* info = reinterpret_cast<rand_pool_info*>(buf.data());
  info->entropy_count = static_cast<int>(seed.size() * 8);
  info->buf_size = static_cast<int>(seed.size());
  std::memcpy(info->buf, seed.data(), seed.size());
  if (ioctl(fd.get(), RNDADDENTROPY, info) == 0 && ioctl(fd.get(), RNDRESEEDCRNG) == 0) *reseeded = true;
  return ok();
}

// systemd and D-Bus programs key per-machine state on /etc/machine-id; a clone keeps its template's
// unless told otherwise. Written by rename so a reader never sees half a file.
Status writeMachineId(const std::string& id) {
  if (id.size() != 32 || id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return makeError(ErrorKind::kInvalidArgument, "machine_id must be 32 lowercase hex digits");
  const char* tmp = "/etc/.machine-id.space";
  UniqueFd fd(open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0444));
  if (!fd) return sysError(errno, "write /etc/machine-id");
  std::string line = id + "\n";
  if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    unlink(tmp);
    return sysError(errno, "write /etc/machine-id");
  }
  fd.reset();
  if (rename(tmp, "/etc/machine-id") < 0) {
    unlink(tmp);
    return sysError(errno, "rename /etc/machine-id");
  }
  return ok();
}

Result<uint32_t> parseIpv4(const json& net, const char* key) {
  std::string text = protocol::optString(net, key);
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1)
    return makeError(ErrorKind::kInvalidArgument, "net.{} '{}' is not an IPv4 address", key, text.substr(0, 64));
  return ntohl(a.s_addr);
}

// The one NIC of a VM: the only interface besides lo (its kernel names it eth0, but nothing relies on it).
Result<std::string> onlyNic() {
  std::string found;
  int count = 0;
  if (DIR* d = opendir("/sys/class/net")) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == ".." || name == "lo") continue;
      found = name;
      ++count;
    }
    closedir(d);
  }
  if (count != 1)
    return makeError(ErrorKind::kConflict, "expected exactly one network interface besides lo, found {}", count);
  return found;
}

// A VM's side of its sandbox link (the jail's is made by the host, SandboxLink::create): lo up, the NIC's
// own address, .2/30 on it, up, default route via .1, and the gateway as the resolver.
Status configureNetwork(const json& net) {
  if (!net.is_object()) return makeError(ErrorKind::kInvalidArgument, "net must be an object");
  ASSIGN_OR_RETURN(uint32_t address, parseIpv4(net, "address"));
  ASSIGN_OR_RETURN(uint32_t gateway, parseIpv4(net, "gateway"));
  int prefix = static_cast<int>(protocol::optInt(net, "prefix", 30));
  if (prefix < 8 || prefix > 30) return makeError(ErrorKind::kInvalidArgument, "net.prefix must be 8..30");
  std::string mac_text = protocol::optString(net, "mac");
  unsigned char mac[6];
  bool have_mac = !mac_text.empty();
  if (have_mac && std::sscanf(mac_text.c_str(), "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3],
                              &mac[4], &mac[5]) != 6)
    return makeError(ErrorKind::kInvalidArgument, "net.mac '{}' is not a MAC address", mac_text.substr(0, 32));
  std::string nameserver = protocol::optString(net, "nameserver");
  in_addr ns{};
  if (!nameserver.empty() && inet_pton(AF_INET, nameserver.c_str(), &ns) != 1)
    return makeError(ErrorKind::kInvalidArgument, "net.nameserver is not an IPv4 address");
  ASSIGN_OR_RETURN(std::string nic, onlyNic());
  ASSIGN_OR_RETURN(auto rtnl, sys::Rtnl::open());
  TRY(rtnl.setUp("lo"));
  // A VM forked from another, or rolled back, comes up with the addresses its snapshot had: every IPv4
  // address on the NIC but the one it gets now goes (with it, the routes through them).
  bool have_address = false;
  if (ifaddrs* list = nullptr; getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || nic != a->ifa_name) continue;
      uint32_t old = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
      int old_prefix =
          a->ifa_netmask ? __builtin_popcount(reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr) : 32;
      if (old == address && old_prefix == prefix) {
        have_address = true;
        continue;
      }
      if (auto st = rtnl.deleteAddressV4(nic, old, old_prefix); !st) {
        freeifaddrs(list);
        return st;
      }
    }
    freeifaddrs(list);
  }
  // A VM restored from a template starts with the template's address on its NIC; it is set while the
  // link is still down (a forked VM's link is up: the driver changes the address live).
  if (have_mac) TRY(rtnl.setMac(nic, mac));
  if (!have_address) TRY(rtnl.addAddressV4(nic, address, prefix));
  TRY(rtnl.setUp(nic));
  TRY(rtnl.addDefaultRouteV4(gateway));
  if (!nameserver.empty()) {
    const char* tmp = "/etc/.resolv.conf.space";
    UniqueFd fd(open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!fd) return sysError(errno, "write /etc/resolv.conf");
    std::string text = "nameserver " + nameserver + "\n";
    if (write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      return sysError(errno, "write /etc/resolv.conf");
    fd.reset();
    unlink("/etc/resolv.conf");  // a symlink into /run (systemd-resolved) is replaced, not followed
    if (rename(tmp, "/etc/resolv.conf") < 0) return sysError(errno, "rename /etc/resolv.conf");
  }
  return ok();
}

}  // namespace

void Server::opSetIdentity(uint32_t ch, const json& msg) {
  json warnings = json::array();
  std::map<std::string, std::string> env;
  if (auto it = msg.find("env"); it != msg.end() && !it->is_null()) {
    if (!it->is_object()) return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, "env must be an object"});
    for (auto& [k, v] : it->items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
          v.get<std::string>().find('\0') != std::string::npos)
        return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, fmt::format("bad env entry \"{}\"", k)});
      env[k] = v.get<std::string>();
    }
  }
  std::string seed_hex = protocol::optString(msg, "rng_seed_hex");
  auto seed = decodeHex(seed_hex);
  if (!seed) return endChannelError(ch, seed.error());

  // Parsed before anything changes: a bad action must not leave half an identity behind.
  std::optional<RestoreAction> restore;
  if (auto it = msg.find("generation"); it != msg.end() && !it->is_null()) {
    auto action = parseRestoreAction(*it);
    if (!action) return endChannelError(ch, action.error());
    restore = *action;
  }

  std::string hostname = protocol::optString(msg, "hostname");
  if (!hostname.empty()) {
    if (hostname.size() > 64 || hostname.find('\0') != std::string::npos)
      return endChannelError(ch, Error{ErrorKind::kInvalidArgument, 0, "hostname longer than 64 bytes"});
    if (sethostname(hostname.data(), hostname.size()) < 0)
      return endChannelError(ch, sysError(errno, "sethostname {}", hostname).value());
  }
  // The network before anything else: a sandbox whose link is not what the host registered with the
  // gateway would look networked and reach nothing.
  if (auto it = msg.find("net"); it != msg.end() && !it->is_null()) {
    if (auto st = configureNetwork(*it); !st) return endChannelError(ch, st.error().context("configure the network"));
  }
  for (auto& [k, v] : env) env_[k] = v;
  bool reseeded = false;
  if (!seed->empty()) {
    if (auto s = mixIntoRng(*seed, &reseeded); !s) warnings.push_back(s.error().message);
  }
  std::string machine_id = protocol::optString(msg, "machine_id");
  if (!machine_id.empty()) {
    if (auto s = writeMachineId(machine_id); !s) warnings.push_back(s.error().message);
  }
  int64_t clock_ms = protocol::optInt(msg, "clock_unix_ms", 0);
  if (clock_ms > 0) {
    timespec ts{static_cast<time_t>(clock_ms / 1000), static_cast<long>(clock_ms % 1000) * 1000000};
    // Inside the jail the clock is the host's and setting it is denied (SECURITY.md J22); in a VM the
    // guest owns its clock. Either way the sandbox keeps running.
    if (clock_settime(CLOCK_REALTIME, &ts) < 0) warnings.push_back(sysError(errno, "clock_settime").value().message);
  }
  json done = {{"event", "done"}, {"rng_reseeded", reseeded}};
  // Last: processes woken (or killed and re-run) now find the new seed, clock, address and generation.
  if (restore) {
    auto generation = beginGeneration(*restore);
    if (!generation) return endChannelError(ch, generation.error());
    for (auto& w : (*generation)["warnings"]) warnings.push_back(w);
    generation->erase("warnings");
    done["generation"] = std::move(*generation);
  }
  done["warnings"] = std::move(warnings);
  endChannel(ch, done);
}

}  // namespace space::agent

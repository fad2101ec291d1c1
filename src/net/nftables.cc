#include "net/nftables.h"

#include <nftables/libnftables.h>

#include <memory>

#include "net/veth.h"

namespace space::net {

namespace {

struct Nft {
  std::unique_ptr<nft_ctx, decltype(&nft_ctx_free)> ctx{nft_ctx_new(NFT_CTX_DEFAULT), nft_ctx_free};
  Nft() {
    if (ctx) {
      nft_ctx_buffer_output(ctx.get());
      nft_ctx_buffer_error(ctx.get());
    }
  }
  Result<std::string> run(const std::string& cmd) {
    if (!ctx) return makeError(ErrorKind::kInternal, "nft_ctx_new failed");
    int rc = nft_run_cmd_from_buffer(ctx.get(), cmd.c_str());
    std::string err = nft_ctx_get_error_buffer(ctx.get());
    std::string out = nft_ctx_get_output_buffer(ctx.get());
    if (rc != 0) return makeError(ErrorKind::kInternal, "nft: {}", err.empty() ? "command failed" : err);
    return out;
  }
};

}  // namespace

std::string ruleset(const EgressPorts& p) {
  std::string ifs = fmt::format("\"{}*\"", kHostLinkPrefix);
  // Priorities: dstnat for the redirects; the filter chains at priority filter - 1 so that SPACE's drops
  // are seen before any accept a host firewall might have (a drop anywhere is final in nftables).
  // The gateway listens on 0.0.0.0; its ports take only what the redirects above bring from sandbox links
  // (decided by the spc* rules before them). Everything else to those ports is dropped, loopback included:
  // the redirects never arrive on lo, and a host process could otherwise bind a sandbox link's host end
  // (.1, inside the sandbox's registered /30) and be taken for that sandbox.
  //
  // antispoof, first of all (priority raw, before conntrack and the redirects): the gateway knows a sandbox
  // by its packets' source address, and a VM guest is root in its own kernel and can send any source. A
  // packet on a sandbox link must come from an address routed back through that same link (its own /30's
  // sandbox end; strict reverse path through fib), never from one of the host's own addresses, and never
  // be IPv6 (sandbox links carry IPv4 only; the gateway identifies no one by IPv6). SECURITY.md V8.
  return fmt::format(R"(table {fam} {name} {{
  chain antispoof {{
    type filter hook prerouting priority raw; policy accept;
    iifname {ifs} meta nfproto ipv6 counter drop
    iifname {ifs} fib saddr type local counter drop
    iifname {ifs} fib saddr . iif oif missing counter drop
  }}
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname {ifs} meta l4proto tcp fib daddr type local tcp dport {xp} redirect to :{proxy}
    iifname {ifs} meta l4proto tcp redirect to :{tp}
    iifname {ifs} udp dport 53 redirect to :{dns}
  }}
  chain input {{
    type filter hook input priority filter - 1; policy accept;
    iifname {ifs} ct state established,related accept
    iifname {ifs} ct status dnat meta l4proto tcp th dport {{ {tp}, {proxy} }} accept
    iifname {ifs} ct status dnat udp dport {dns} accept
    iifname {ifs} drop
    meta l4proto tcp th dport {{ {tp}, {proxy} }} drop
    udp dport {dns} drop
  }}
  chain forward {{
    type filter hook forward priority filter - 1; policy accept;
    iifname {ifs} drop
    oifname {ifs} drop
  }}
}}
)",
                     fmt::arg("fam", kTableFamily), fmt::arg("name", kTableName), fmt::arg("ifs", ifs),
                     fmt::arg("xp", p.explicit_proxy_port), fmt::arg("proxy", p.proxy), fmt::arg("tp", p.transparent),
                     fmt::arg("dns", p.dns));
}

Status installTable(const EgressPorts& ports) {
  Nft nft;
  // One transaction: create if missing, delete it (drops old rules), then the new table. Either all of it
  // applies or nothing does.
  std::string cmd =
      fmt::format("add table {0} {1}\ndelete table {0} {1}\n{2}", kTableFamily, kTableName, ruleset(ports));
  auto r = nft.run(cmd);
  if (!r) return tl::unexpected(r.error().context("install nftables table"));
  return ok();
}

Status removeTable() {
  Nft nft;
  auto r = nft.run(fmt::format("add table {0} {1}\ndelete table {0} {1}\n", kTableFamily, kTableName));
  if (!r) return tl::unexpected(r.error().context("remove nftables table"));
  return ok();
}

Result<std::string> listTable() {
  Nft nft;
  return nft.run(fmt::format("list table {} {}", kTableFamily, kTableName));
}

Result<bool> tableExists() {
  Nft nft;
  ASSIGN_OR_RETURN(auto out, nft.run("list tables"));
  return out.find(fmt::format("table {} {}\n", kTableFamily, kTableName)) != std::string::npos;
}

}  // namespace space::net

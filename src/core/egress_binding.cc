// The manager's side of the egress gateway (core/egress_binding.h).
#include "core/egress_binding.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <thread>

#include "common/ids.h"
#include "core/lifecycle.h"
#include "egress/names.h"
#include "egress/policy.h"
#include "egress/secrets.h"
#include "egress/tls_ca.h"

namespace space::core {
namespace {

using nlohmann::json;

constexpr const char* kCaFile = "/usr/local/share/ca-certificates/space.crt";
constexpr const char* kSystemBundle = "/etc/ssl/certs/ca-certificates.crt";
constexpr size_t kMaxBundleBytes = 8 << 20;
constexpr auto kLogPollInterval = std::chrono::milliseconds(200);

json denyAll() { return {{"mode", "deny-all"}, {"rules", json::array()}}; }

Result<std::string> readSandboxFile(agent::AgentClient& agent, const std::string& path) {
  ASSIGN_OR_RETURN(auto reader, agent.readFile(path));
  std::string out;
  for (;;) {
    ASSIGN_OR_RETURN(std::string chunk, reader->read(1 << 16));
    if (chunk.empty()) return out;
    out += chunk;
    if (out.size() > kMaxBundleBytes) return makeError(ErrorKind::kResourceExhausted, "{} is larger than 8 MiB", path);
  }
}

// Puts the sandbox's CA into its trust store: its own file, and appended to the distribution's bundle when
// the template has one (then every TLS client of the sandbox trusts it). Returns the bundle that the
// SSL_CERT_FILE family of variables should name.
Result<std::string> installCa(agent::AgentClient& agent, const std::string& cert_pem) {
  TRY(agent.mkdir("/usr/local/share/ca-certificates", /*parents=*/true, 0755));
  TRY(agent::writeWholeFile(agent, kCaFile, cert_pem));
  if (!agent.stat(kSystemBundle)) return std::string(kCaFile);
  ASSIGN_OR_RETURN(std::string bundle, readSandboxFile(agent, kSystemBundle));
  if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
  TRY(agent::writeWholeFile(agent, kSystemBundle, bundle + cert_pem));
  return std::string(kSystemBundle);
}

std::string newPlaceholder() { return "space_ph_" + randomHex(16); }

bool validEnvName(const std::string& k) {
  bool valid = !k.empty() && k.size() <= 64 && !(k[0] >= '0' && k[0] <= '9');
  for (char c : k)
    valid = valid && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
  return valid;
}

}  // namespace

Result<store::SecretBox*> EgressBinding::secretBox() {
  std::lock_guard lock(secret_box_mu_);
  if (!secret_box_) {
    ASSIGN_OR_RETURN(auto box, store::SecretBox::open(ctx_.config.state_dir + "/node.key"));
    secret_box_ = std::move(box);
  }
  return &*secret_box_;
}

std::string EgressBinding::offMessage() const {
  std::string why = off_reason_.empty() ? "egress is off on this node" : off_reason_;
  return why + " ('space node' shows it; spaced --egress on makes it required, and says why it cannot start)";
}

std::string EgressBinding::noNetworkMessage(const std::string& id) const {
  if (!egress_) return fmt::format("sandbox {} has no network: {}", id, offMessage());
  return fmt::format("sandbox {} has no network: it was made while egress was off (a sandbox made now gets one)", id);
}

Status EgressBinding::checkRequest(const CreateSandbox& cmd, const std::string& isolation) const {
  bool wants = cmd.network.has_value() || !cmd.secrets.empty();
  if (!wants) return ok();
  if (!egress_)
    return makeError(ErrorKind::kUnsupported,
                     "sandboxes of this node have no network, so network policies and secrets "
                     "cannot apply: {}",
                     offMessage());
  if (!ctx_.runtimeFor(isolation).capabilities().networked)
    return makeError(ErrorKind::kUnsupported,
                     "the {} tier of this node has no network: egress came up after it, or "
                     "without the address pool (restart spaced with egress on)",
                     isolation);
  return ok();
}

Status EgressBinding::attach(store::SandboxRecord& rec, runtime::Instance& inst) {
  ASSIGN_OR_RETURN(auto ca, egress::tls::CertAuthority::generate(rec.id));
  ASSIGN_OR_RETURN(std::string bundle, installCa(*inst.agent, ca->certPem()));
  rec.spec["egress"] = {{"policy", denyAll()},
                        {"secrets", json::array()},
                        {"ca", {{"cert_pem", ca->certPem()}, {"key_pem", ca->keyPem()}}},
                        {"ca_bundle", bundle}};
  rec.persisted = inst.persisted.state;
  ASSIGN_OR_RETURN(json reg, registration(rec));
  // A gateway that is down right now is not fatal: the sandbox's traffic is refused until the supervisor
  // has restarted it and registered every sandbox again.
  if (auto r = egress_->registerSandbox(reg); !r) spdlog::warn("egress: register {}: {}", rec.id, r.error().message);
  return ok();
}

Result<json> EgressBinding::secretBindings(const json& bound) {
  json out = json::array();
  for (const auto& b : bound) {
    std::string name = b.value("name", "");
    auto rec = ctx_.store.getSecret(name);
    if (!rec) {
      spdlog::warn("egress: secret {} is gone from the store; its placeholder stays unbound", name);
      continue;
    }
    ASSIGN_OR_RETURN(store::SecretBox * box, secretBox());
    ASSIGN_OR_RETURN(std::string value, box->unseal(rec->sealed_value, name));
    json s = {{"name", name},
              {"placeholder", b.value("placeholder", "")},
              {"value", value},
              {"hosts", rec->hosts},
              {"header", rec->header}};
    if (!rec->format.empty()) s["format"] = rec->format;
    if (!rec->methods.empty()) s["methods"] = rec->methods;
    if (!rec->path_prefixes.empty()) s["path_prefixes"] = rec->path_prefixes;
    out.push_back(std::move(s));
  }
  return out;
}

Result<json> EgressBinding::registration(const store::SandboxRecord& rec) {
  const json& e = rec.spec["egress"];
  auto network = ctx_.runtimeFor(rec.runtime).network({rec.id, rec.runtime, rec.persisted});
  if (!network) return makeError(ErrorKind::kInternal, "sandbox {} has no subnet", rec.id);
  ASSIGN_OR_RETURN(json secrets, secretBindings(e.value("secrets", json::array())));
  json reg = {{"id", rec.id},
              {"sources", json::array({network->subnet.cidr()})},
              {"policy", e.value("policy", denyAll())},
              {"secrets", secrets},
              {"ca", e["ca"]}};
  // The host end of its veth (jail) or tap (vm): the gateway takes the subnet's addresses only from there.
  if (!network->link.empty()) reg["link"] = network->link;
  return reg;
}

Result<std::map<std::string, std::string>> EgressBinding::handOver(store::SandboxRecord& rec,
                                                                   const CreateSandbox& cmd) {
  json& e = rec.spec["egress"];
  std::map<std::string, std::string> env;
  std::string bundle = e.value("ca_bundle", std::string(kCaFile));
  for (const char* var : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}) env[var] = bundle;
  env["NODE_EXTRA_CA_CERTS"] = kCaFile;
  if (!cmd.network && cmd.secrets.empty()) return env;
  json bound = json::array();
  for (const auto& name : cmd.secrets) {
    auto rec_secret = ctx_.store.getSecret(name);
    if (!rec_secret) {
      if (rec_secret.error().kind == ErrorKind::kNotFound)
        return makeError(ErrorKind::kInvalidArgument, "secret '{}' does not exist (see `space secret ls`)", name);
      return tl::unexpected(rec_secret.error());
    }
    std::string placeholder = newPlaceholder();
    bound.push_back({{"name", name}, {"placeholder", placeholder}});
    env[name] = placeholder;
  }
  if (cmd.network) e["policy"] = *cmd.network;
  e["secrets"] = bound;
  ASSIGN_OR_RETURN(json secrets, secretBindings(bound));
  auto st = egress_->update(rec.id, e["policy"], secrets);
  if (!st) return tl::unexpected(st.error().context("apply the network policy"));
  return env;
}

void EgressBinding::detach(const store::SandboxRecord& rec) {
  if (!egress_ || !rec.spec.contains("egress")) return;
  if (auto st = egress_->remove(rec.id); !st) spdlog::warn("egress: remove {}: {}", rec.id, st.error().message);
}

void EgressBinding::resync() {
  if (!egress_) return;
  store::SandboxFilter all;
  all.include_pooled = true;
  auto records = ctx_.store.listSandboxes(all);
  if (!records) return;
  int n = 0;
  for (const auto& rec : *records) {
    // Every sandbox whose network exists: those being made hold their deny-all registration already.
    bool networked = rec.state == SandboxState::kStarting || rec.state == SandboxState::kRunning ||
                     rec.state == SandboxState::kPaused;
    if (!rec.spec.contains("egress") || !networked) continue;
    auto reg = registration(rec);
    if (!reg) {
      spdlog::error("egress: re-register {}: {}", rec.id, reg.error().message);
      continue;
    }
    if (auto r = egress_->registerSandbox(*reg); !r) {
      spdlog::error("egress: re-register {}: {}", rec.id, r.error().message);
      continue;
    }
    ++n;
  }
  spdlog::info("egress: registered {} sandboxes with space-egress", n);
}

Result<json> EgressBinding::getNetwork(const std::string& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, ctx_.store.getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  if (!rec.spec.contains("egress")) return makeError(ErrorKind::kUnsupported, "{}", noNetworkMessage(id));
  const json& e = rec.spec["egress"];
  json out = e.value("policy", denyAll());
  json names = json::array();
  for (const auto& s : e.value("secrets", json::array())) names.push_back(s.value("name", ""));
  out["secrets"] = names;
  if (auto network = ctx_.runtimeFor(rec.runtime).network({rec.id, rec.runtime, rec.persisted})) {
    out["subnet"] = network->subnet.cidr();
    out["gateway"] = network->subnet.hostText();
    out["address"] = network->subnet.sandboxText();  // what the gateway's audit lines name as the source
  }
  return out;
}

Result<json> EgressBinding::setNetwork(const std::string& id, const json& policy) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, ctx_.store.getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  if (!rec.spec.contains("egress") || !egress_) return makeError(ErrorKind::kUnsupported, "{}", noNetworkMessage(id));
  TRY(transitionOf(rec, LifecycleEvent::kSetNetwork));
  TRY(egress_->update(id, policy, std::nullopt));
  rec.spec["egress"]["policy"] = policy;
  TRY(ctx_.store.updateSandbox(rec));
  return getNetwork(id);
}

Status EgressBinding::streamNetLog(const std::string& id, bool follow,
                                   const std::function<bool(const std::string&)>& sink) {
  ASSIGN_OR_RETURN(store::SandboxRecord rec, ctx_.store.getSandbox(id));
  if (rec.pooled) return notFoundError("sandbox", "sandbox {} not found", id);
  if (!egress_) return makeError(ErrorKind::kUnsupported, "no audit log: {}", offMessage());
  std::ifstream in(egress_->auditLogPath());
  std::string line, partial;
  for (;;) {
    while (std::getline(in, line)) {
      if (in.eof()) {  // no newline yet: the gateway is writing this line right now
        partial += line;
        break;
      }
      line = partial + line;
      partial.clear();
      auto j = json::parse(line, nullptr, false);
      if (j.is_object() && j.value("sandbox", std::string()) == id && !sink(line)) return ok();
    }
    if (!follow) return ok();
    if (!sink("")) return ok();  // a keep-alive probe: false when the client went away
    in.clear();
    std::this_thread::sleep_for(kLogPollInterval);
    if (!in.is_open()) in.open(egress_->auditLogPath());
  }
}

Result<store::SecretRecord> EgressBinding::setSecret(const SetSecret& cmd) {
  if (!validEnvName(cmd.name))
    return makeError(ErrorKind::kInvalidArgument,
                     "secret name '{}' must match [A-Za-z_][A-Za-z0-9_]* (at most 64): "
                     "it becomes the sandbox's environment variable",
                     cmd.name.substr(0, 64));
  if (cmd.value.empty()) return makeError(ErrorKind::kInvalidArgument, "secret value is empty");
  if (cmd.hosts.empty())
    return makeError(ErrorKind::kInvalidArgument, "a secret needs at least one host it is bound to");
  egress::SecretBinding probe;
  probe.name = cmd.name;
  probe.placeholder = newPlaceholder();
  probe.value = cmd.value;
  probe.header = cmd.header;
  probe.format = cmd.format;
  probe.methods = cmd.methods;
  probe.path_prefixes = cmd.path_prefixes;
  store::SecretRecord rec;
  rec.name = cmd.name;
  rec.header = cmd.header;
  rec.format = cmd.format;
  rec.methods = cmd.methods;
  rec.path_prefixes = cmd.path_prefixes;
  for (const auto& h : cmd.hosts) {
    auto normal = egress::normalizePattern(h);
    if (!normal)
      return makeError(ErrorKind::kInvalidArgument, "host '{}': {}", h.substr(0, 255), normal.error().message);
    probe.hosts.push_back(*normal);
    rec.hosts.push_back(*normal);
  }
  if (auto st = egress::validateBinding(probe); !st)
    return makeError(ErrorKind::kInvalidArgument, "secret {}: {}", cmd.name, st.error().message);
  ASSIGN_OR_RETURN(store::SecretBox * box, secretBox());
  ASSIGN_OR_RETURN(rec.sealed_value, box->seal(cmd.value, cmd.name));
  rec.created_ms = nowUnixMs();
  TRY(ctx_.store.putSecret(rec));
  rec.sealed_value.clear();
  return rec;
}

Result<std::vector<store::SecretRecord>> EgressBinding::listSecrets() {
  ASSIGN_OR_RETURN(auto all, ctx_.store.listSecrets());
  for (auto& r : all) r.sealed_value.clear();
  return all;
}

Status EgressBinding::removeSecret(const std::string& name) { return ctx_.store.deleteSecret(name); }

void EgressBinding::startWatching() {
  if (!egress_) return;
  egress_->setOnRestart([this] { resync(); });
  egress_->startWatching();
}

std::optional<uint16_t> EgressBinding::explicitProxyPort() const {
  if (!egress_) return std::nullopt;
  return egress_->ports().explicit_proxy_port;
}

json EgressBinding::info() const {
  json e = {{"on", egress_ != nullptr}};
  if (!egress_) e["reason"] = off_reason_.empty() ? "egress is off" : off_reason_;
  return e;
}

Status EgressBinding::stopGateway() { return egress_ ? egress_->stopGateway() : ok(); }

}  // namespace space::core

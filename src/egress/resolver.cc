#include "egress/resolver.h"

#include <ares.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <deque>
#include <thread>

#include "common/unique_fd.h"

namespace space::egress {

namespace {

class CaresResolver final : public Resolver {
 public:
  ~CaresResolver() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
    if (channel_) ares_destroy(channel_);
  }

  Status init(const std::string& servers, std::chrono::milliseconds timeout) {
    static std::once_flag once;
    std::call_once(once, [] { ares_library_init(ARES_LIB_INIT_ALL); });
    ares_options opts{};
    opts.timeout = int(timeout.count());
    opts.tries = 2;
    opts.lookups = const_cast<char*>("b");  // DNS only, never /etc/hosts
    int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS;
    if (int rc = ares_init_options(&channel_, &opts, mask); rc != ARES_SUCCESS)
      return makeError(ErrorKind::kInternal, "c-ares init: {}", ares_strerror(rc));
    if (!servers.empty())
      if (int rc = ares_set_servers_ports_csv(channel_, servers.c_str()); rc != ARES_SUCCESS)
        return makeError(ErrorKind::kInvalidArgument, "resolver servers '{}': {}", servers, ares_strerror(rc));
    wake_fd_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd_) return sysError(errno, "eventfd");
    return ok();
  }

  Status start() override {
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    return ok();
  }

  void resolve(const std::string& name, std::function<void(Result<Resolution>)> done) override {
    {
      std::lock_guard lock(mu_);
      queue_.push_back({name, std::move(done)});
    }
    wake();
  }

 private:
  struct Request {
    std::string name;
    std::function<void(Result<Resolution>)> done;
  };

  void wake() {
    uint64_t one = 1;
    if (wake_fd_) (void)!write(wake_fd_.get(), &one, sizeof one);
  }

  static void onResult(void* arg, int status, int, ares_addrinfo* res) {
    std::unique_ptr<Request> req(static_cast<Request*>(arg));
    if (status != ARES_SUCCESS) {
      if (res) ares_freeaddrinfo(res);
      ErrorKind kind =
          (status == ARES_ENOTFOUND || status == ARES_ENODATA) ? ErrorKind::kNotFound : ErrorKind::kUnavailable;
      req->done(makeError(kind, "resolve {}: {}", req->name, ares_strerror(status)));
      return;
    }
    Resolution out;
    int ttl = INT32_MAX;
    std::vector<IpAddress> v6;
    for (auto* n = res->nodes; n; n = n->ai_next) {
      auto ip = fromSockaddr(n->ai_addr);
      if (!ip) continue;
      ttl = std::min(ttl, n->ai_ttl);
      (ip->v6 ? v6 : out.addresses).push_back(*ip);
    }
    ares_freeaddrinfo(res);
    out.addresses.insert(out.addresses.end(), v6.begin(), v6.end());
    out.ttl = std::chrono::seconds(ttl == INT32_MAX ? 0 : std::max(ttl, 0));
    if (out.addresses.empty()) {
      req->done(makeError(ErrorKind::kNotFound, "resolve {}: no addresses", req->name));
      return;
    }
    req->done(std::move(out));
  }

  void loop() {
    while (true) {
      std::deque<Request> batch;
      {
        std::lock_guard lock(mu_);
        if (stopping_) break;
        batch.swap(queue_);
      }
      for (auto& r : batch) {
        auto* req = new Request(std::move(r));
        ares_addrinfo_hints hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_flags = ARES_AI_NOSORT;  // sorting would open probe sockets towards the answers
        ares_getaddrinfo(channel_, req->name.c_str(), nullptr, &hints, &CaresResolver::onResult, req);
      }
      ares_socket_t socks[ARES_GETSOCK_MAXNUM];
      int bits = ares_getsock(channel_, socks, ARES_GETSOCK_MAXNUM);
      std::vector<pollfd> fds{{wake_fd_.get(), POLLIN, 0}};
      for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
        short ev = 0;
        if (ARES_GETSOCK_READABLE(bits, i)) ev |= POLLIN;
        if (ARES_GETSOCK_WRITABLE(bits, i)) ev |= POLLOUT;
        if (ev) fds.push_back({socks[i], ev, 0});
      }
      timeval tv{}, max{1, 0};
      timeval* t = ares_timeout(channel_, &max, &tv);
      int ms = int(t->tv_sec * 1000 + t->tv_usec / 1000);
      int n = poll(fds.data(), fds.size(), ms);
      if (n < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) {
        uint64_t v;
        (void)!read(wake_fd_.get(), &v, sizeof v);
      }
      bool any = false;
      for (size_t i = 1; i < fds.size(); ++i) {
        ares_socket_t rd = (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) ? fds[i].fd : ARES_SOCKET_BAD;
        ares_socket_t wr = (fds[i].revents & POLLOUT) ? fds[i].fd : ARES_SOCKET_BAD;
        if (rd != ARES_SOCKET_BAD || wr != ARES_SOCKET_BAD) {
          ares_process_fd(channel_, rd, wr);
          any = true;
        }
      }
      if (!any) ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts
    }
    ares_cancel(channel_);  // runs the remaining callbacks with ARES_ECANCELLED
  }

  ares_channel channel_ = nullptr;
  UniqueFd wake_fd_;
  std::mutex mu_;
  std::deque<Request> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Resolver>> makeCaresResolver(const std::string& servers, std::chrono::milliseconds timeout) {
  auto r = std::make_unique<CaresResolver>();
  TRY(r->init(servers, timeout));
  return std::unique_ptr<Resolver>(std::move(r));
}

std::optional<NameCache::Pinned> NameCache::peek(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(name);
  auto now = now_();
  if (it == entries_.end() || it->second.resolving || it->second.expires <= now) return std::nullopt;
  return Pinned{it->second.addresses, std::chrono::duration_cast<std::chrono::seconds>(it->second.expires - now)};
}

void NameCache::lookup(const std::string& name, std::function<void(Result<Pinned>)> done) {
  std::optional<Result<Pinned>> immediate;  // answered outside the lock: done may call back into the cache
  {
    std::lock_guard lock(mu_);
    auto now = now_();
    auto it = entries_.find(name);
    if (it != entries_.end()) {
      Entry& e = it->second;
      if (e.resolving) {
        e.waiters.push_back(std::move(done));
        return;
      }
      if (e.expires > now) {
        immediate = Pinned{e.addresses, std::chrono::duration_cast<std::chrono::seconds>(e.expires - now)};
      }
    }
    if (!immediate && entries_.size() >= kMaxEntries) {
      for (auto i = entries_.begin(); i != entries_.end();)
        i = (!i->second.resolving && i->second.expires <= now) ? entries_.erase(i) : std::next(i);
      if (entries_.size() >= kMaxEntries) immediate = makeError(ErrorKind::kResourceExhausted, "name cache full");
    }
    if (!immediate) {
      Entry& e = entries_[name];
      e.resolving = true;
      e.waiters.push_back(std::move(done));
    }
  }
  if (immediate) {
    done(std::move(*immediate));
    return;
  }
  resolver_.resolve(name, [this, name](Result<Resolution> r) {
    std::vector<std::function<void(Result<Pinned>)>> waiters;
    Result<Pinned> out = makeError(ErrorKind::kInternal, "unset");
    {
      std::lock_guard lock(mu_);
      Entry& e = entries_[name];
      e.resolving = false;
      waiters.swap(e.waiters);
      if (r) {
        auto pin = std::clamp(r->ttl, kMinPin, kMaxPin);
        e.addresses = r->addresses;
        e.expires = now_() + pin;
        out = Pinned{e.addresses, pin};
      } else {
        entries_.erase(name);
        out = tl::unexpected(r.error());
      }
    }
    for (auto& w : waiters) w(out);
  });
}

}  // namespace space::egress

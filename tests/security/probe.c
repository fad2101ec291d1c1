// Hostile probe run inside a sandbox by tests/security/test_jail.py; compiled statically on the host.
// Usage: probe CHECK [args]. Every check prints one line per attempt:
//   DENIED <what> errno=<n> (<name>)     the kernel refused with a permission-type error
//   ALLOWED <what> ...                   the operation worked (or failed for a reason other than permission)
// and exits 0 when every attempt was denied, 10 when any was allowed. Resource checks print facts instead.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/sched.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <stddef.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <linux/if_ether.h>
#include <netinet/in.h>

static int allowed_any = 0;

static int is_denial(int e) { return e == EPERM || e == EACCES || e == ENOSYS || e == EROFS; }

// ret < 0 with a permission errno = denied; anything else = allowed.
static void report(const char* what, long ret, int err) {
  if (ret < 0 && is_denial(err)) {
    printf("DENIED %s errno=%d (%s)\n", what, err, strerror(err));
  } else {
    allowed_any = 1;
    if (ret < 0)
      printf("ALLOWED %s ret=%ld errno=%d (%s) [not a permission error]\n", what, ret, err, strerror(err));
    else
      printf("ALLOWED %s ret=%ld\n", what, ret);
  }
  fflush(stdout);
}

#define TRY(what, expr)        \
  do {                         \
    errno = 0;                 \
    long _r = (long)(expr);    \
    report(what, _r, errno);   \
  } while (0)

static void do_mounts(void) {
  mkdir("/tmp/m", 0755);
  TRY("mount proc", mount("proc", "/tmp/m", "proc", 0, NULL));
  TRY("mount sysfs", mount("sysfs", "/tmp/m", "sysfs", 0, NULL));
  TRY("mount tmpfs", mount("tmpfs", "/tmp/m", "tmpfs", 0, NULL));
  TRY("mount cgroup v1 (release_agent)", mount("cgroup", "/tmp/m", "cgroup", 0, "rdma,release_agent=/tmp/x"));
  TRY("mount cgroup2", mount("cgroup2", "/tmp/m", "cgroup2", 0, NULL));
  mkdir("/tmp/lo", 0755); mkdir("/tmp/up", 0755); mkdir("/tmp/wk", 0755);
  TRY("mount overlay", mount("overlay", "/tmp/m", "overlay", 0, "lowerdir=/tmp/lo,upperdir=/tmp/up,workdir=/tmp/wk"));
  TRY("bind mount /", mount("/", "/tmp/m", NULL, MS_BIND | MS_REC, NULL));
  TRY("remount / rw", mount(NULL, "/", NULL, MS_REMOUNT, NULL));
  TRY("umount /proc", umount2("/proc", MNT_DETACH));
  TRY("fsopen tmpfs", syscall(SYS_fsopen, "tmpfs", 0));
  TRY("open_tree /", syscall(SYS_open_tree, AT_FDCWD, "/", 1 /*OPEN_TREE_CLONE*/));
}

// unshare -Urm then mount: done in a child so the probe's own namespaces stay.
static void do_unshare_mount(void) {
  pid_t p = fork();
  if (p == 0) {
    errno = 0;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
      report("unshare(NEWUSER|NEWNS)", -1, errno);
      _exit(allowed_any ? 10 : 0);
    }
    report("unshare(NEWUSER|NEWNS)", 0, 0);
    TRY("mount tmpfs after unshare -Urm", mount("tmpfs", "/tmp", "tmpfs", 0, NULL));
    TRY("mount proc after unshare -Urm", mount("proc", "/proc", "proc", 0, NULL));
    _exit(allowed_any ? 10 : 0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 10) allowed_any = 1;
  if (WIFSIGNALED(st)) printf("DENIED unshare child killed by signal %d\n", WTERMSIG(st));
}

static void do_unshare(void) {
  struct { const char* name; int flag; } fl[] = {
      {"CLONE_NEWUSER", CLONE_NEWUSER}, {"CLONE_NEWNS", CLONE_NEWNS}, {"CLONE_NEWNET", CLONE_NEWNET},
      {"CLONE_NEWPID", CLONE_NEWPID}, {"CLONE_NEWUTS", CLONE_NEWUTS}, {"CLONE_NEWIPC", CLONE_NEWIPC},
      {"CLONE_NEWCGROUP", CLONE_NEWCGROUP}, {"CLONE_NEWTIME", 0x00000080}};
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
    pid_t p = fork();
    if (p == 0) {
      char what[64];
      snprintf(what, sizeof what, "unshare(%s)", fl[i].name);
      errno = 0;
      long r = unshare(fl[i].flag);
      report(what, r, errno);
      _exit(allowed_any ? 10 : 0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 10) allowed_any = 1;
  }
}

static void do_setns(void) {
  const char* ns[] = {"mnt", "net", "pid", "user", "uts", "ipc", "cgroup"};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    char path[64], what[64];
    snprintf(path, sizeof path, "/proc/1/ns/%s", ns[i]);
    int fd = open(path, O_RDONLY);
    snprintf(what, sizeof what, "setns(%s of pid 1)", ns[i]);
    if (fd < 0) {
      report(what, -1, errno == ENOENT ? EPERM : errno);
      continue;
    }
    TRY(what, setns(fd, 0));
    close(fd);
  }
}

static int child_fn(void* arg) { return 0; }

static void do_clone3(void) {
  struct { const char* name; uint64_t flag; } fl[] = {
      {"clone3(NEWUSER)", CLONE_NEWUSER}, {"clone3(NEWNS)", CLONE_NEWNS}, {"clone3(NEWNET)", CLONE_NEWNET},
      {"clone3(NEWPID)", CLONE_NEWPID}, {"clone3(NEWCGROUP)", CLONE_NEWCGROUP}};
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = fl[i].flag;
    args.exit_signal = SIGCHLD;
    errno = 0;
    long r = syscall(SYS_clone3, &args, sizeof args);
    if (r == 0) _exit(0);
    int e = errno;
    if (r > 0) waitpid(r, NULL, 0);
    report(fl[i].name, r, e);
  }
  // Classic clone() with namespace flags too.
  static char stack[65536];
  errno = 0;
  long r = clone(child_fn, stack + sizeof stack, CLONE_NEWUSER | SIGCHLD, NULL);
  int e = errno;
  if (r > 0) waitpid(r, NULL, 0);
  report("clone(NEWUSER)", r, e);
}

static void do_handles(void) {
  struct { struct file_handle fh; unsigned char buf[128]; } h;
  memset(&h, 0, sizeof h);
  h.fh.handle_bytes = 128;
  int mount_id = 0;
  errno = 0;
  long r = syscall(SYS_name_to_handle_at, AT_FDCWD, "/etc/passwd", &h.fh, &mount_id, 0);
  report("name_to_handle_at", r, errno);
  // The shocker handle: inode 2 (the root of most host filesystems), generation 0.
  struct { struct file_handle fh; uint32_t ino[2]; } shocker;
  shocker.fh.handle_bytes = 8;
  shocker.fh.handle_type = 1;
  shocker.ino[0] = 2;
  shocker.ino[1] = 0;
  int dirfd = open("/", O_RDONLY | O_DIRECTORY);
  errno = 0;
  r = syscall(SYS_open_by_handle_at, dirfd, &shocker.fh, O_RDONLY);
  report("open_by_handle_at(shocker inode 2)", r, errno);
  if (r >= 0) {
    char buf[256];
    ssize_t n = read((int)r, buf, sizeof buf);
    printf("  read %zd bytes through the handle\n", n);
  }
}

static void do_kernel(void) {
  TRY("init_module", syscall(SYS_init_module, NULL, 0, ""));
  TRY("finit_module", syscall(SYS_finit_module, 0, "", 0));
  TRY("delete_module", syscall(SYS_delete_module, "nonexistent_module_xyz", O_NONBLOCK));
  TRY("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
  TRY("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
  // CAD_OFF is harmless even if it were allowed.
  TRY("reboot(CAD_OFF)", syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2, LINUX_REBOOT_CMD_CAD_OFF, NULL));
  TRY("swapon", syscall(SYS_swapon, "/tmp/nonexistent-swap", 0));
  TRY("swapoff", syscall(SYS_swapoff, "/tmp/nonexistent-swap"));
  TRY("acct", syscall(SYS_acct, "/tmp/acct"));
  TRY("iopl", syscall(SYS_iopl, 3));
  TRY("ioperm", syscall(SYS_ioperm, 0x80, 1, 1));
}

static void do_kernel_features(void) {
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 4;
  attr.max_entries = 1;
  TRY("bpf(MAP_CREATE)", syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
  struct perf_event_attr pe;
  memset(&pe, 0, sizeof pe);
  pe.type = PERF_TYPE_SOFTWARE;
  pe.size = sizeof pe;
  pe.config = PERF_COUNT_SW_CPU_CLOCK;
  pe.disabled = 1;
  pe.exclude_kernel = 1;
  TRY("perf_event_open", syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
  TRY("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC | 1 /*UFFD_USER_MODE_ONLY*/));
  unsigned char params[120];
  memset(params, 0, sizeof params);
  TRY("io_uring_setup", syscall(SYS_io_uring_setup, 4, params));
  TRY("keyctl(GET_KEYRING_ID)", syscall(SYS_keyctl, 0 /*KEYCTL_GET_KEYRING_ID*/, -3 /*SESSION*/, 0));
  TRY("add_key", syscall(SYS_add_key, "user", "space-probe", "payload", 7, -2 /*PROCESS keyring*/));
  TRY("request_key", syscall(SYS_request_key, "user", "space-probe-missing", NULL, 0));
}

static void do_mknod(void) {
  TRY("mknod char 1:3", mknod("/tmp/nulldev", S_IFCHR | 0666, makedev(1, 3)));
  TRY("mknod block 8:0", mknod("/tmp/sda", S_IFBLK | 0666, makedev(8, 0)));
  TRY("mknod /dev/mem 1:1", mknod("/tmp/mem", S_IFCHR | 0666, makedev(1, 1)));
}

static void do_sockets(void) {
  int fd;
  errno = 0;
  fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  report("socket(AF_PACKET, SOCK_RAW)", fd, errno);
  if (fd >= 0) close(fd);
  errno = 0;
  fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
  report("socket(AF_INET, SOCK_RAW)", fd, errno);
  if (fd >= 0) close(fd);
  errno = 0;
  fd = socket(AF_INET6, SOCK_RAW, IPPROTO_RAW);
  report("socket(AF_INET6, SOCK_RAW)", fd, errno);
  if (fd >= 0) close(fd);
}

// Prints facts, not a verdict: whether a raw socket can be opened and which interfaces it sees.
static void do_netinfo(void) {
  int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  printf("packet_socket=%s\n", fd >= 0 ? "yes" : "no");
}

static void do_tiocsti(void) {
  int master = -1, slave = -1;
  if (openpty(&master, &slave, NULL, NULL, NULL) < 0) {
    printf("DENIED openpty errno=%d (%s) [no pty at all]\n", errno, strerror(errno));
    return;
  }
  pid_t p = fork();
  if (p == 0) {
    setsid();
    ioctl(slave, TIOCSCTTY, 0);
    char c = 'x';
    errno = 0;
    long r = syscall(SYS_ioctl, slave, (unsigned long)TIOCSTI, &c);
    report("ioctl(TIOCSTI)", r, errno);
    errno = 0;
    r = syscall(SYS_ioctl, slave, (unsigned long)TIOCSTI | 0x100000000UL, &c);
    report("ioctl(TIOCSTI|1<<32)", r, errno);
    _exit(allowed_any ? 10 : 0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 10) allowed_any = 1;
  if (WIFSIGNALED(st)) printf("DENIED tiocsti child killed by signal %d\n", WTERMSIG(st));
}

static void do_time(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);  // setting the clock to what it already is: harmless if allowed
  TRY("clock_settime(REALTIME)", clock_settime(CLOCK_REALTIME, &now));
  struct timeval tv;
  gettimeofday(&tv, NULL);
  TRY("settimeofday", settimeofday(&tv, NULL));
  struct timex tx;
  memset(&tx, 0, sizeof tx);
  adjtimex(&tx);  // read the current tick, then try to set it to the same value
  tx.modes = ADJ_TICK;
  TRY("adjtimex(ADJ_TICK)", adjtimex(&tx));
  memset(&tx, 0, sizeof tx);
  clock_adjtime(CLOCK_REALTIME, &tx);
  tx.modes = ADJ_TICK;
  TRY("clock_adjtime(ADJ_TICK)", clock_adjtime(CLOCK_REALTIME, &tx));
}

static void do_ptrace(void) {
  errno = 0;
  long r = ptrace(PTRACE_ATTACH, 1, NULL, NULL);
  int e = errno;
  if (r == 0) {
    waitpid(1, NULL, __WALL);
    ptrace(PTRACE_DETACH, 1, NULL, NULL);
  }
  report("ptrace(ATTACH, 1)", r, e);
  errno = 0;
  r = ptrace(PTRACE_SEIZE, 1, NULL, NULL);
  e = errno;
  if (r == 0) ptrace(PTRACE_DETACH, 1, NULL, NULL);
  report("ptrace(SEIZE, 1)", r, e);
  char buf[16];
  struct iovec local = {buf, sizeof buf}, remote = {(void*)0x400000, sizeof buf};
  errno = 0;
  r = syscall(SYS_process_vm_readv, 1, &local, 1, &remote, 1, 0);
  e = errno;
  // EFAULT means access was granted and only the address was bad.
  report("process_vm_readv(pid 1)", r, e);
  int pidfd = (int)syscall(SYS_pidfd_open, 1, 0);
  if (pidfd >= 0) {
    errno = 0;
    r = syscall(SYS_pidfd_getfd, pidfd, 0, 0);
    report("pidfd_getfd(pid 1, fd 0)", r, errno);
  }
}

// fork bomb: forks until refused, keeps the children alive for a moment, reports how many it got.
static void do_forkbomb(long seconds) {
  long n = 0, err = 0;
  for (;;) {
    pid_t p = fork();
    if (p == 0) {
      sleep(seconds);
      _exit(0);
    }
    if (p < 0) {
      err = errno;
      break;
    }
    n++;
    if (n > 100000) break;
  }
  printf("forked=%ld errno=%ld (%s)\n", n, err, strerror((int)err));
  fflush(stdout);
  kill(0, SIGKILL);
}

static void do_memhog(long mib) {
  long got = 0;
  for (long i = 0; i < mib; i++) {
    char* p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      printf("mmap failed after %ld MiB errno=%d\n", got, errno);
      return;
    }
    memset(p, 0x5a, 1 << 20);
    got++;
    if (got % 16 == 0) {
      printf("touched=%ld\n", got);
      fflush(stdout);
    }
  }
  printf("survived touching %ld MiB\n", got);
}

static void do_fill(const char* path, long max_mib) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    printf("open failed errno=%d (%s)\n", errno, strerror(errno));
    return;
  }
  static char buf[1 << 20];
  memset(buf, 0xab, sizeof buf);
  long long written = 0;
  int err = 0;
  while (written < (long long)max_mib << 20) {
    ssize_t n = write(fd, buf, sizeof buf);
    if (n < 0) {
      err = errno;
      break;
    }
    written += n;
    if (n < (ssize_t)sizeof buf) {
      // short write: the next one reports the error
      continue;
    }
  }
  if (!err && fsync(fd) < 0) err = errno;
  if (!err && close(fd) < 0) err = errno;
  printf("written=%lld errno=%d (%s)\n", written, err, err ? strerror(err) : "none");
}

static void do_mkfiles(const char* dir, long max) {
  mkdir(dir, 0755);
  char path[4096];
  long n = 0;
  int err = 0;
  for (; n < max; n++) {
    snprintf(path, sizeof path, "%s/f%ld", dir, n);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
      err = errno;
      break;
    }
    close(fd);
  }
  printf("created=%ld errno=%d (%s)\n", n, err, err ? strerror(err) : "none");
}

// Writes garbage to every fd of this process and of pid 1 that it can reach.
static void do_garbage(void) {
  unsigned char junk[4096];
  int ur = open("/dev/urandom", O_RDONLY);
  if (ur >= 0) {
    read(ur, junk, sizeof junk);
    close(ur);
  }
  int hits = 0;
  const char* dirs[] = {"/proc/self/fd", "/proc/1/fd"};
  for (int d = 0; d < 2; d++) {
    DIR* dir = opendir(dirs[d]);
    if (!dir) {
      printf("opendir %s errno=%d (%s)\n", dirs[d], errno, strerror(errno));
      continue;
    }
    struct dirent* e;
    while ((e = readdir(dir))) {
      if (e->d_name[0] == '.') continue;
      char path[300];
      snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
      int fd = open(path, O_WRONLY | O_NONBLOCK);
      if (fd >= 0) {
        for (int i = 0; i < 16; i++)
          if (write(fd, junk, sizeof junk) > 0) hits++;
        close(fd);
      }
      if (d == 0) {
        int n = atoi(e->d_name);
        for (int i = 0; i < 16; i++)
          if (write(n, junk, sizeof junk) > 0) hits++;
      }
    }
    closedir(dir);
  }
  // The agent's own descriptors, stolen through pidfd_getfd when that is possible.
  int pidfd = (int)syscall(SYS_pidfd_open, 1, 0);
  int stolen = 0;
  if (pidfd >= 0) {
    for (int n = 0; n < 256; n++) {
      int fd = (int)syscall(SYS_pidfd_getfd, pidfd, n, 0);
      if (fd < 0) continue;
      stolen++;
      for (int i = 0; i < 16; i++)
        if (write(fd, junk, sizeof junk) > 0) hits++;
      close(fd);
    }
  }
  for (int n = 0; n < 1024; n++) {
    if (n == 1 || n == 2) continue;
    write(n, junk, sizeof junk);
  }
  printf("\ngarbage: writes=%d stolen_agent_fds=%d\n", hits, stolen);
}

static void do_connect_abstract(const char* name) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  a.sun_path[0] = 0;
  strncpy(a.sun_path + 1, name, sizeof a.sun_path - 2);
  socklen_t len = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name);
  errno = 0;
  int r = connect(fd, (struct sockaddr*)&a, len);
  printf("connect abstract @%s: %s errno=%d (%s)\n", name, r == 0 ? "CONNECTED" : "failed", errno, strerror(errno));
}

static void do_connect_path(const char* path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  strncpy(a.sun_path, path, sizeof a.sun_path - 1);
  errno = 0;
  int r = connect(fd, (struct sockaddr*)&a, sizeof a);
  printf("connect %s: %s errno=%d (%s)\n", path, r == 0 ? "CONNECTED" : "failed", errno, strerror(errno));
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: probe CHECK [args]\n");
    return 2;
  }
  const char* c = argv[1];
  long a2 = argc > 2 ? atol(argv[2]) : 0;
  if (!strcmp(c, "mount")) do_mounts();
  else if (!strcmp(c, "unshare-mount")) do_unshare_mount();
  else if (!strcmp(c, "unshare")) do_unshare();
  else if (!strcmp(c, "setns")) do_setns();
  else if (!strcmp(c, "clone3")) do_clone3();
  else if (!strcmp(c, "handles")) do_handles();
  else if (!strcmp(c, "kernel")) do_kernel();
  else if (!strcmp(c, "features")) do_kernel_features();
  else if (!strcmp(c, "mknod")) do_mknod();
  else if (!strcmp(c, "sockets")) do_sockets();
  else if (!strcmp(c, "netinfo")) do_netinfo();
  else if (!strcmp(c, "tiocsti")) do_tiocsti();
  else if (!strcmp(c, "time")) do_time();
  else if (!strcmp(c, "ptrace")) do_ptrace();
  else if (!strcmp(c, "forkbomb")) { do_forkbomb(a2 ? a2 : 5); return 0; }
  else if (!strcmp(c, "memhog")) { do_memhog(a2); return 0; }
  else if (!strcmp(c, "fill") && argc > 3) { do_fill(argv[2], atol(argv[3])); return 0; }
  else if (!strcmp(c, "mkfiles") && argc > 3) { do_mkfiles(argv[2], atol(argv[3])); return 0; }
  else if (!strcmp(c, "garbage")) { do_garbage(); return 0; }
  else if (!strcmp(c, "connect-abstract") && argc > 2) { do_connect_abstract(argv[2]); return 0; }
  else if (!strcmp(c, "connect-path") && argc > 2) { do_connect_path(argv[2]); return 0; }
  else {
    fprintf(stderr, "unknown check %s\n", c);
    return 2;
  }
  printf("PROBE-END %s\n", allowed_any ? "SOME-ALLOWED" : "ALL-DENIED");
  return allowed_any ? 10 : 0;
}

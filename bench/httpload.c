/* HTTP/1.1 keep-alive load generator and upstream server for bench/run's egress phase. Built static by the
 * bench (cc -O2 -static) so that the same binary runs on the host, in the bench's upstream namespace and
 * inside any sandbox rootfs.
 *
 *   httpload serve ADDR PORT
 *       single-threaded epoll server; every GET gets "200 ok" (Content-Length 2), keep-alive.
 *   httpload load ADDR PORT TARGET HOST CONNS SECONDS|-N
 *       CONNS keep-alive connections to ADDR:PORT, each sending "GET TARGET" with "Host: HOST" and waiting
 *       for the whole answer before the next (no pipelining); for SECONDS, or -N: N requests in all.
 *       A connection the other side closes (or answers "Connection: close") is reopened; that is counted.
 *       Prints one JSON object: requests, seconds, rps, reconnects, errors, and with -N the latency of
 *       every request in ms (send of the request to the last byte of the answer, reconnects included).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char* what) {
  fprintf(stderr, "httpload: %s: %s\n", what, strerror(errno));
  exit(2);
}

static struct sockaddr_in addr_of(const char* ip, int port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    fprintf(stderr, "httpload: bad address %s\n", ip);
    exit(2);
  }
  return a;
}

/* ------------------------------------------------------------------------------------------ server */

#define SBUF 16384
struct sconn {
  int fd;
  size_t len;
  char buf[SBUF];
};

static int serve(const char* ip, int port) {
  static const char reply[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = addr_of(ip, port);
  if (bind(ls, (struct sockaddr*)&a, sizeof a) != 0) die("bind");
  if (listen(ls, 1024) != 0) die("listen");
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  printf("ready\n");
  fflush(stdout);
  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1);
    for (int i = 0; i < n; i++) {
      struct sconn* c = evs[i].data.ptr;
      if (!c) {
        int fd;
        while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          c = calloc(1, sizeof *c);
          c->fd = fd;
          struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
        }
        continue;
      }
      ssize_t r = read(c->fd, c->buf + c->len, SBUF - c->len);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        close(c->fd);
        free(c);
        continue;
      }
      c->len += r;
      /* Every complete head is one request (GET, no body); answer them all in one write. */
      char out[sizeof reply * 64];
      size_t olen = 0;
      char* p;
      while ((p = memmem(c->buf, c->len, "\r\n\r\n", 4)) && olen + sizeof reply < sizeof out) {
        size_t used = p + 4 - c->buf;
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
        memcpy(out + olen, reply, sizeof reply - 1);
        olen += sizeof reply - 1;
      }
      if (olen && write(c->fd, out, olen) != (ssize_t)olen) {
        close(c->fd);
        free(c);
        continue;
      }
      if (c->len == SBUF) { /* a head larger than the buffer: not ours */
        close(c->fd);
        free(c);
      }
    }
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ client */

#define CBUF 65536
struct lconn {
  int fd;
  int sent;      /* a request is outstanding */
  size_t len;    /* bytes of the answer so far */
  double t0;     /* when the outstanding request was sent */
  char buf[CBUF];
};

static struct sockaddr_in target;
static char request[2048];
static size_t request_len;
static int ep;
static long reconnects, errors;

static int open_conn(struct lconn* c) {
  int one = 1;
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0) die("socket");
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* Connect with a deadline: a dropped SYN would otherwise block for minutes. */
  int flags = fcntl(c->fd, F_GETFL);
  fcntl(c->fd, F_SETFL, flags | O_NONBLOCK);
  int rc = connect(c->fd, (struct sockaddr*)&target, sizeof target);
  if (rc != 0 && errno == EINPROGRESS) {
    struct pollfd p = {.fd = c->fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, 5000) == 1 && getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) rc = 0;
    else errno = err ? err : ETIMEDOUT;
  }
  fcntl(c->fd, F_SETFL, flags);
  if (rc != 0) {
    fprintf(stderr, "httpload: connect: %s\n", strerror(errno));
    close(c->fd);
    c->fd = -1;
    errors++;
    return -1;
  }
  c->len = 0;
  c->sent = 0;
  struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
  epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
  return 0;
}

static void close_conn(struct lconn* c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

static int send_request(struct lconn* c, double t0) {
  if (c->fd < 0 && open_conn(c) != 0) return -1;
  c->t0 = t0;
  if (write(c->fd, request, request_len) != (ssize_t)request_len) {
    close_conn(c);
    reconnects++;
    if (open_conn(c) != 0 || write(c->fd, request, request_len) != (ssize_t)request_len) return -1;
  }
  c->sent = 1;
  c->len = 0;
  return 0;
}

/* 1: a whole answer is in c->buf (sets *close_after), 0: need more, -1: malformed. */
static int answer_complete(struct lconn* c, int* close_after) {
  char* end = memmem(c->buf, c->len, "\r\n\r\n", 4);
  if (!end) return c->len >= CBUF ? -1 : 0;
  size_t head = end + 4 - c->buf;
  if (c->len < 12 || memcmp(c->buf, "HTTP/1.", 7) != 0) return -1;
  long clen = -1;
  *close_after = c->buf[7] == '0';
  for (char* h = memmem(c->buf, head, "\r\n", 2) + 2; h < end; h = memmem(h, end + 2 - h, "\r\n", 2) + 2) {
    char* eol = memmem(h, end + 2 - h, "\r\n", 2);
    if (!strncasecmp(h, "Content-Length:", 15)) {
      clen = strtol(h + 15, NULL, 10);
    } else if (!strncasecmp(h, "Connection:", 11)) {
      char* v = memmem(h, eol - h, "close", 5);
      if (v) *close_after = 1;
    }
  }
  if (clen < 0) return -1; /* the bench's upstream always sends a length */
  return c->len >= head + (size_t)clen ? 1 : 0;
}

static int load(const char* ip, int port, const char* path, const char* host, int conns, const char* howlong) {
  target = addr_of(ip, port);
  request_len = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: httpload\r\n\r\n",
                         path, host);
  double seconds = 0;
  long count = 0;
  if (howlong[0] == '-') count = atol(howlong + 1);
  else seconds = atof(howlong);
  double* lat = count ? calloc(count, sizeof(double)) : NULL;
  ep = epoll_create1(EPOLL_CLOEXEC);
  struct lconn* cs = calloc(conns, sizeof *cs);
  for (int i = 0; i < conns; i++) {
    cs[i].fd = -1;
    if (open_conn(&cs[i]) != 0) die("connect");
  }
  long done = 0, issued = 0;
  double start = now(), deadline = start + seconds;
  for (int i = 0; i < conns && (!count || issued < count); i++)
    if (send_request(&cs[i], now()) == 0) issued++;
  struct epoll_event evs[64];
  double progress = start;
  while (count ? done < count : now() < deadline) {
    int n = epoll_wait(ep, evs, 64, 1000);
    if (n == 0 && count && issued == done) break;
    if (n == 0 && now() - progress > 10) { /* an answer that never comes: say so instead of hanging */
      fprintf(stderr, "httpload: no answer for 10 s (%ld of %ld done)\n", done, count);
      errors++;
      break;
    }
    for (int i = 0; i < n; i++) {
      struct lconn* c = evs[i].data.ptr;
      ssize_t r = read(c->fd, c->buf + c->len, CBUF - c->len);
      int close_after = 0, st = 0;
      if (r > 0) {
        c->len += r;
        st = answer_complete(c, &close_after);
        if (st == 0) continue;
      }
      if (st < 0) { /* not an answer this client understands (e.g. chunked): stop, do not loop */
        fprintf(stderr, "httpload: unexpected answer: %.200s\n", c->buf);
        errors++;
        goto out;
      }
      if (r <= 0) { /* closed while a request was outstanding: resend it */
        if (r < 0 && errno == EAGAIN) continue;
        close_conn(c);
        reconnects++;
        if (c->sent && send_request(c, c->t0) != 0) errors++;
        continue;
      }
      double t = now();
      progress = t;
      if (lat && done < count) lat[done] = (t - c->t0) * 1000.0;
      done++;
      c->sent = 0;
      if (close_after) {
        close_conn(c);
        reconnects++;
      }
      if ((!count && t < deadline) || (count && issued < count)) {
        if (send_request(c, t) == 0) issued++;
        else errors++;
      }
    }
  }
out:;
  double elapsed = now() - start;
  printf("{\"requests\": %ld, \"seconds\": %.4f, \"rps\": %.1f, \"reconnects\": %ld, \"errors\": %ld", done,
         elapsed, done / elapsed, reconnects, errors);
  if (lat) {
    printf(", \"lat_ms\": [");
    for (long i = 0; i < done; i++) printf("%s%.4f", i ? ", " : "", lat[i]);
    printf("]");
  }
  printf("}\n");
  return errors ? 1 : 0;
}

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc == 4 && !strcmp(argv[1], "serve")) return serve(argv[2], atoi(argv[3]));
  if (argc == 8 && !strcmp(argv[1], "load"))
    return load(argv[2], atoi(argv[3]), argv[4], argv[5], atoi(argv[6]), argv[7]);
  fprintf(stderr, "usage: httpload serve ADDR PORT | load ADDR PORT TARGET HOST CONNS SECONDS|-N\n");
  return 2;
}

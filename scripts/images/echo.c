/* A workload that says what it was sent, for wake on request's tests on a real node: serves
 * HTTP on $PORT (8080), one process per connection.
 *   - a request without a body: 200 "ok" (so /healthz is a readiness endpoint);
 *   - a request with a body (Content-Length): 200 "bytes=N fnv1a64=HEX", N and the FNV-1a hash
 *     of the body as it arrived, so a test can tell a body passed whole;
 *   - a WebSocket upgrade: 101, then every text or binary message is sent back as it came.
 * Exits 0 on SIGTERM, as PID 1 must do itself. Static, so its image is this binary alone. */
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

/* SHA-1 (RFC 3174), for Sec-WebSocket-Accept only. */
static uint32_t rol(uint32_t v, int n) { return (v << n) | (v >> (32 - n)); }
static void sha1(const unsigned char *msg, size_t len, unsigned char out[20]) {
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  size_t total = ((len + 8) / 64 + 1) * 64;
  unsigned char *m = calloc(total, 1);
  if (!m) _exit(1);
  memcpy(m, msg, len);
  m[len] = 0x80;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++) m[total - 1 - i] = (unsigned char)(bits >> (8 * i));
  for (size_t off = 0; off < total; off += 64) {
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
      w[i] = (uint32_t)m[off + 4 * i] << 24 | (uint32_t)m[off + 4 * i + 1] << 16 |
             (uint32_t)m[off + 4 * i + 2] << 8 | m[off + 4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
      uint32_t f, k;
      if (i < 20) { f = (b & c) | (~b & d); k = 0x5A827999; }
      else if (i < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1; }
      else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC; }
      else { f = b ^ c ^ d; k = 0xCA62C1D6; }
      uint32_t t = rol(a, 5) + f + e + k + w[i];
      e = d; d = c; c = rol(b, 30); b = a; a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
  }
  free(m);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 4; j++) out[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}

static void base64(const unsigned char *in, size_t len, char *out) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < len; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0) |
                 (i + 2 < len ? in[i + 2] : 0);
    out[o++] = t[v >> 18 & 63];
    out[o++] = t[v >> 12 & 63];
    out[o++] = i + 1 < len ? t[v >> 6 & 63] : '=';
    out[o++] = i + 2 < len ? t[v & 63] : '=';
  }
  out[o] = 0;
}

static int write_all(int c, const void *p, size_t n) {
  const char *b = p;
  while (n > 0) {
    ssize_t w = write(c, b, n);
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Reads exactly n bytes, taking first what is left in the head's buffer. */
static char *pending;
static size_t pending_len;
static int read_exact(int c, unsigned char *p, size_t n) {
  while (n > 0) {
    if (pending_len > 0) {
      size_t k = pending_len < n ? pending_len : n;
      memcpy(p, pending, k);
      pending += k; pending_len -= k; p += k; n -= k;
      continue;
    }
    ssize_t r = read(c, p, n);
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* The value of header `name` in `head`, copied into `out`; 0 when absent. */
static int header(const char *head, const char *name, char *out, size_t cap) {
  size_t nl = strlen(name);
  for (const char *l = strstr(head, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
    const char *h = l + 2;
    if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
      const char *v = h + nl + 1;
      while (*v == ' ') v++;
      size_t k = strcspn(v, "\r\n");
      if (k >= cap) k = cap - 1;
      memcpy(out, v, k);
      out[k] = 0;
      return 1;
    }
  }
  return 0;
}

static void websocket(int c, const char *key) {
  char buf[320], accept[64];
  unsigned char digest[20];
  snprintf(buf, sizeof buf, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
  sha1((const unsigned char *)buf, strlen(buf), digest);
  base64(digest, 20, accept);
  char reply[256];
  int n = snprintf(reply, sizeof reply,
                   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Accept: %s\r\n\r\n", accept);
  if (write_all(c, reply, (size_t)n) < 0) return;
  for (;;) {
    unsigned char h[2], mask[4], ext[8];
    if (read_exact(c, h, 2) < 0) return;
    int opcode = h[0] & 0x0f;
    uint64_t len = h[1] & 0x7f;
    if (len == 126) {
      if (read_exact(c, ext, 2) < 0) return;
      len = (uint64_t)ext[0] << 8 | ext[1];
    } else if (len == 127) {
      if (read_exact(c, ext, 8) < 0) return;
      len = 0;
      for (int i = 0; i < 8; i++) len = len << 8 | ext[i];
    }
    if (len > (1 << 20)) return;
    if ((h[1] & 0x80) && read_exact(c, mask, 4) < 0) return;
    unsigned char *p = malloc(len + 1);
    if (!p || read_exact(c, p, len) < 0) return;
    if (h[1] & 0x80)
      for (uint64_t i = 0; i < len; i++) p[i] ^= mask[i % 4];
    unsigned char out[10];
    size_t o = 0;
    out[o++] = (unsigned char)(0x80 | (opcode == 9 ? 10 : opcode));
    if (len < 126) out[o++] = (unsigned char)len;
    else { out[o++] = 126; out[o++] = (unsigned char)(len >> 8); out[o++] = (unsigned char)len; }
    if (write_all(c, out, o) < 0 || write_all(c, p, len) < 0) return;
    free(p);
    if (opcode == 8) return;
  }
}

static void serve(int c) {
  static char head[16384];
  size_t got = 0;
  char *end = NULL;
  while (!end) {
    if (got == sizeof head - 1) return;
    ssize_t r = read(c, head + got, sizeof head - 1 - got);
    if (r <= 0) return;
    got += (size_t)r;
    head[got] = 0;
    end = strstr(head, "\r\n\r\n");
  }
  pending = end + 4;
  pending_len = got - (size_t)(pending - head);
  end[2] = 0;
  char value[256];
  if (header(head, "Upgrade", value, sizeof value) && strcasecmp(value, "websocket") == 0 &&
      header(head, "Sec-WebSocket-Key", value, sizeof value)) {
    websocket(c, value);
    return;
  }
  char reply[256];
  int n;
  if (header(head, "Content-Length", value, sizeof value)) {
    unsigned long long want = strtoull(value, NULL, 10), seen = 0;
    uint64_t hash = 0xcbf29ce484222325ULL;
    unsigned char buf[65536];
    while (seen < want) {
      size_t k = want - seen < sizeof buf ? (size_t)(want - seen) : sizeof buf;
      ssize_t r;
      if (pending_len > 0) {
        r = (ssize_t)(pending_len < k ? pending_len : k);
        memcpy(buf, pending, (size_t)r);
        pending += r; pending_len -= (size_t)r;
      } else if ((r = read(c, buf, k)) <= 0) {
        break;
      }
      for (ssize_t i = 0; i < r; i++) hash = (hash ^ buf[i]) * 0x100000001b3ULL;
      seen += (unsigned long long)r;
    }
    char body[96];
    int b = snprintf(body, sizeof body, "bytes=%llu fnv1a64=%016llx\n", seen, (unsigned long long)hash);
    n = snprintf(reply, sizeof reply,
                 "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                 "Connection: close\r\n\r\n%s", b, body);
  } else {
    n = snprintf(reply, sizeof reply, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                      "Content-Length: 3\r\nConnection: close\r\n\r\nok\n");
  }
  (void)write_all(c, reply, (size_t)n);
}

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = stop;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGCHLD, SIG_IGN); /* children reaped by the kernel */
  const char *p = getenv("PORT");
  int port = p ? atoi(p) : 8080;
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 256) < 0) {
    perror("echo: listen");
    return 1;
  }
  fprintf(stderr, "echo: serving on :%d\n", port);
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    pid_t pid = fork();
    if (pid == 0) {
      close(s);
      signal(SIGTERM, SIG_DFL);
      serve(c);
      close(c);
      _exit(0);
    }
    close(c);
  }
}

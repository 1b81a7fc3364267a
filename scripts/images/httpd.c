/* A workload that really runs: serves HTTP on $PORT (8080), answering every path with 200 and
 * "ok" (so /healthz is a real readiness endpoint), and exits 0 on SIGTERM, as PID 1 must do itself.
 * Static, so its image is this binary alone. */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = stop;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  const char *p = getenv("PORT");
  int port = p ? atoi(p) : 8080;
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 64) < 0) {
    perror("httpd: listen");
    return 1;
  }
  fprintf(stderr, "httpd: serving on :%d\n", port);
  static const char reply[] =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    char buf[1024];
    (void)read(c, buf, sizeof buf); /* the request; every path gets the same answer */
    (void)write(c, reply, sizeof reply - 1);
    close(c);
  }
}

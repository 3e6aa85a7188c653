/* Shifts a process's wall clock (CLOCK_REALTIME) by the milliseconds written in the file
 * named by CLOCKSHIFT_FILE; the monotonic clock is left alone. Loaded into redis-server with
 * LD_PRELOAD to jump the server's clock. Raw syscalls only: libfaketime recurses through
 * redis-server's jemalloc (dlsym allocates) and the server never starts. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms(void) {
  const char *path = getenv("CLOCKSHIFT_FILE");
  if (!path) return 0;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
  if (fd < 0) return 0;
  char text[32];
  long n = syscall(SYS_read, fd, text, sizeof text - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return 0;
  text[n] = 0;
  return atoll(text);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  long r = syscall(SYS_clock_gettime, id, ts);
  if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    long long o = offset_ms();
    long long ns = (long long)ts->tv_nsec + (o % 1000) * 1000000LL;
    ts->tv_sec += o / 1000 + ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    if (ts->tv_nsec < 0) {
      ts->tv_nsec += 1000000000LL;
      ts->tv_sec -= 1;
    }
  }
  return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  int r = clock_gettime(CLOCK_REALTIME, &ts);
  if (r == 0 && tv) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  (void)tz;
  return r;
}

time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}

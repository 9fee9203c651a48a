/*
 * clock_shift.so: shifts the wall clock of the process it is preloaded
 * into (LD_PRELOAD) by the offset in the file named by CLOCK_SHIFT_FILE,
 * re-read on every call: a signed decimal number of seconds ("+30.000",
 * "-1.5"), the format of libfaketime's FAKETIME offsets. Only the wall
 * clock moves (CLOCK_REALTIME and its coarse variant, gettimeofday, time);
 * the monotonic clocks are left alone, as an NTP step leaves them.
 *
 * Why not libfaketime: it cannot start a program linked with jemalloc
 * (Valkey, Redis): its initialisation calls dlsym, which allocates, and
 * jemalloc's initialisation reads the clock before libfaketime is ready
 * ("Unexpected recursive calls to clock_gettime()"; libfaketime issue
 * #130, open). This shim reads the real clock with the raw system call
 * and allocates nothing, so it needs no initialisation at all.
 *
 * Built by `cargo xtask chaos --server-clock` (cc -shared -fPIC).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL

/* The offset in ns; 0 when the variable or the file is missing or the
 * text is not a number. errno is left as it was. */
static long long offset_ns(void) {
    const char *path = getenv("CLOCK_SHIFT_FILE");
    if (path == NULL) {
        return 0;
    }
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return 0;
    }
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    errno = saved;
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    const char *p = buf;
    long long sign = 1;
    if (*p == '+') {
        p++;
    } else if (*p == '-') {
        sign = -1;
        p++;
    }
    long long secs = 0;
    long long frac = 0;
    long long scale = NS_PER_S;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        secs = secs * 10 + (*p - '0');
        if (secs > 100LL * 365 * 86400) {
            return 0;
        }
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (scale > 1) {
                scale /= 10;
                frac += (*p - '0') * scale;
            }
            p++;
            digits++;
        }
    }
    while (*p == '\n' || *p == ' ') {
        p++;
    }
    if (digits == 0 || *p != '\0') {
        return 0;
    }
    return sign * (secs * NS_PER_S + frac);
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * NS_PER_S + ts->tv_nsec + offset_ns();
    long long sec = ns / NS_PER_S;
    long long rem = ns % NS_PER_S;
    if (rem < 0) {
        rem += NS_PER_S;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)rem;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    long rc = syscall(SYS_clock_gettime, clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        shift(ts);
    }
    return (int)rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return -1;
    }
    /* glibc declares tv non-null */
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    if (tz != NULL) {
        struct timezone *zone = tz;
        zone->tz_minuteswest = 0;
        zone->tz_dsttime = 0;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}

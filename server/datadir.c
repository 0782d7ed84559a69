/* datadir.c - one hpod per data directory (see datadir.h). */
#include "datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int srv_data_dir_lock(const char *dir, hpo_error *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/hpod.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return hpo_fail(err, HPO_EIO, "data-dir", "cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char text[32] = "";
            ssize_t n = pread(fd, text, sizeof text - 1, 0);
            text[n > 0 ? n : 0] = '\0';
            long pid = strtol(text, NULL, 10);
            close(fd);
            if (pid > 0)
                return hpo_fail(err, HPO_ECONFLICT, "data-dir", "data dir %s in use by pid %ld", dir, pid);
            return hpo_fail(err, HPO_ECONFLICT, "data-dir", "data dir %s in use by another hpod", dir);
        }
        HPO_WARN("cannot lock %s (%s): nothing stops a second hpod on this data dir", path, strerror(e));
        close(fd);
        return 0;
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) || pwrite(fd, text, (size_t)n, 0) != n)
        HPO_WARN("cannot write the pid to %s: %s", path, strerror(errno));
    /* fd stays open (and the lock held) until the process exits */
    return 0;
}

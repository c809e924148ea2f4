/* Bearer token files for the client tools; see feed/token_file.h. */
#include "feed/token_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/strutil.h"

int feed_token_file_read(const char *path, const char *what, char *out, size_t cap, char *err,
                         size_t err_cap)
{
    int rc = FEED_EINVAL;
    FILE *f = NULL;
    size_t n;
    if (cap < FEED_TOKEN_FILE_MAX + 1) {
        feed_set_err(err, err_cap, "%s: token buffer too small", what);
        goto out;
    }
    f = fopen(path, "rb");
    if (!f) {
        feed_set_err(err, err_cap, "%s: cannot open '%s': %s", what, path, strerror(errno));
        goto out;
    }
    /* One byte past the cap tells a file at the cap from a larger one. */
    n = fread(out, 1, FEED_TOKEN_FILE_MAX, f);
    if (ferror(f)) {
        feed_set_err(err, err_cap, "%s: cannot read '%s': %s", what, path, strerror(errno));
        goto out;
    }
    if (n == FEED_TOKEN_FILE_MAX && fgetc(f) != EOF) {
        feed_set_err(err, err_cap, "%s: '%s' is larger than %u bytes", what, path,
                     FEED_TOKEN_FILE_MAX);
        goto out;
    }
    if (memchr(out, '\0', n)) {
        feed_set_err(err, err_cap, "%s: '%s' holds a NUL byte", what, path);
        goto out;
    }
    if (n && out[n - 1] == '\n')
        n--;
    if (n && out[n - 1] == '\r') /* as feedd strips it */
        n--;
    out[n] = '\0';
    if (n == 0) {
        feed_set_err(err, err_cap, "%s: '%s' holds an empty token", what, path);
        goto out;
    }
    rc = 0;
out:
    if (rc)
        explicit_bzero(out, cap); /* a refused file's bytes may still be a secret */
    if (f)
        fclose(f);
    return rc;
}

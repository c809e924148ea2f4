/*
 * How a test executable tells ctest it was skipped: it prints one line
 * "SKIP: <why>" on stdout and exits FEED_TEST_SKIP, the SKIP_RETURN_CODE of
 * every test (tests/CMakeLists.txt); scripts/test.sh lists those lines.
 * Executables with tests that read the real ImageNet sample run them, and
 * only them, when given --imagenet-sample (their own ctest entry,
 * NAME_imagenet_sample), so the rest still runs, and counts, without it.
 */
#ifndef FEED_TESTS_SUPPORT_FEEDTEST_SKIP_H
#define FEED_TESTS_SUPPORT_FEEDTEST_SKIP_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FEED_TEST_SKIP 77

/* True when argv asks for the tests that need the ImageNet sample. */
static inline bool feed_test_sample_mode(int argc, char **argv)
{
    return argc > 1 && strcmp(argv[1], "--imagenet-sample") == 0;
}

/* True when $FEED_SAMPLE_DIR is a directory; otherwise prints why it skips. */
static inline bool feed_test_have_sample(void)
{
    const char *dir = getenv("FEED_SAMPLE_DIR");
    struct stat st;
    if (dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return true;
    printf("SKIP: the ImageNet sample is absent (FEED_SAMPLE_DIR=%s)\n", dir ? dir : "unset");
    return false;
}

/* main()'s first check in a test that starts feedd: true when ${FEED_BUILD_DIR}/server/feedd
 * is built, with SIGPIPE ignored (a server that goes away must not kill the test); otherwise
 * prints why it skips (return FEED_TEST_SKIP then). */
static inline bool feed_test_have_feedd(void)
{
    char exe[512];
    const char *bdir = getenv("FEED_BUILD_DIR");
    snprintf(exe, sizeof exe, "%s/server/feedd", bdir ? bdir : ".");
    if (!bdir || access(exe, X_OK) != 0) {
        printf("SKIP: feedd not built (%s)\n", exe);
        return false;
    }
    signal(SIGPIPE, SIG_IGN);
    return true;
}

#endif

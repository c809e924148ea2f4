/*
 * feed-bench's table (bench/e2e/report.c, report_table) on made-up results:
 * when the remote source, served by feedd processes the benchmark spawned on
 * this machine, comes out slower than sync, the table says why (they share
 * this machine's CPUs) and what to run instead (--servers on other hosts,
 * --server-cpus); with external servers, or remote faster than sync, it says
 * nothing of the kind. Single-threaded; no servers, no timings.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

/* The table for sync at 100 images/s and remote at remote_ips, as a malloc'd string. */
static char *table(uint32_t spawned, double remote_ips)
{
    bench_meta m;
    memset(&m, 0, sizeof m);
    m.device_kind = "cpu";
    m.model = "mlp";
    m.data_path = "data/default";
    m.dataset_name = "default";
    m.servers = "127.0.0.1:1";
    m.spawned = spawned;
    m.server_threads = 2;
    m.affinity_cpus = 2;
    snprintf(m.step.device_name, sizeof m.step.device_name, "cpu");
    run_result runs[2];
    memset(runs, 0, sizeof runs);
    snprintf(runs[0].source, sizeof runs[0].source, "sync");
    runs[0].images_per_s = 100.0;
    snprintf(runs[1].source, sizeof runs[1].source, "remote");
    runs[1].images_per_s = remote_ips;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    report_table(f, &m, runs, 2);
    fclose(f);
    return buf;
}

static void test_spawned_remote_slower_than_sync_says_why(void **state)
{
    (void)state;
    char *t = table(1, 58.0);
    assert_non_null(strstr(t, "remote at 0.58x of sync"));
    assert_non_null(strstr(t, "sharing its 2 CPUs"));
    assert_non_null(strstr(t, "--servers HOST:PORT"));
    free(t);
}

static void test_no_note_when_it_does_not_apply(void **state)
{
    (void)state;
    char *t = table(0, 58.0); /* external servers: their cores are not this machine's */
    assert_null(strstr(t, "sharing its"));
    free(t);
    t = table(1, 130.0);
    assert_null(strstr(t, "sharing its"));
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spawned_remote_slower_than_sync_says_why),
        cmocka_unit_test(test_no_note_when_it_does_not_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

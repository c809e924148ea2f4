/*
 * A tiny program built against the installed libfeedclient (by pkg-config and
 * by find_package), proving the headers and the library are usable from a
 * clean prefix. Exits 0 when every check holds.
 */
#include <stdio.h>
#include <string.h>

#include <feed/client.h>

int main(void)
{
    feed_loader_config cfg;
    feed_loader *l = NULL;
    feed_loader_config_default(&cfg);
    if (cfg.batch_size != 256 || cfg.transform.out_h != 224)
        return 1;
    /* No targets: refused before any network. */
    if (feed_loader_open(&cfg, &l) != FEED_EINVAL || l)
        return 2;
    if (strcmp(feed_strerror(FEED_EUNAVAILABLE), "no server available") != 0)
        return 3;
    feed_loader_close(NULL);
    printf("consumer ok: %s\n", feed_err_name(FEED_EEOF));
    return 0;
}

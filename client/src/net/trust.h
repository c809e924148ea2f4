/*
 * What the loader's calls carry to be trusted: the channel credentials (TLS
 * with a CA file and, for mutual TLS, a client certificate, or insecure) and
 * the bearer token's metadata, from the config's files and token or
 * $FEED_TOKEN. Read once, by feed_loader_open on the caller's thread, so the
 * caller's strings need not outlive it; the key is wiped after use.
 */
#ifndef FEED_CLIENT_TRUST_H
#define FEED_CLIENT_TRUST_H

#include "client_impl.h"

/* Fills l->creds and l->auth_md; clears the config's trust strings. 0, FEED_EINVAL (logged) or
 * FEED_ENOMEM. */
int client_trust_open(loader *l);
/* Releases what client_trust_open made. Safe after a failed or no open. */
void client_trust_close(loader *l);

#endif

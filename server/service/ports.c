/*
 * The service's ports (see service_int.h): which listener takes the gRPC
 * ports (feedd's own, with the transport guard, where server/net/grpc151 is
 * built and the gRPC core loaded is the one it was written for; else
 * gRPC's), the token and TLS credentials, binding the gRPC and Health ports,
 * and starting feedd's listeners and the guard once the server has started.
 *
 * Ownership: the main thread, during feedd_service_start; the listeners'
 * accept callbacks (on_grpc_connection, on_health_connection) run on the
 * listener's thread and only hand the descriptor to gRPC.
 */
#include <stdio.h>
#include <string.h>

#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "certcheck.h"
#include "guard.h"
#include "listener.h"
#include "service_int.h"

#ifdef FEEDD_GRPC151_CORE
/*
 * A connection on the gRPC port, from the service's own listener
 * (listener.h: gRPC 1.51's would stop accepting for good at the first
 * EMFILE). gRPC owns fd from here: without TLS through the C API, with TLS
 * through the external-connection port (handoff.h), which runs the
 * handshake.
 */
static void on_grpc_connection(void *arg, int fd, const struct sockaddr *addr, socklen_t len)
{
    feedd_service *svc = arg;
    feedd_guard_track(svc->guard, fd, addr, len);
    if (svc->handoff.handler)
        feedd_handoff_fd(&svc->handoff, feedd_listener_fd(svc->listener), fd);
    else
        grpc_server_add_channel_from_fd(svc->server, fd, svc->creds);
}

/* A connection on the plaintext Health port beside the TLS one. */
static void on_health_connection(void *arg, int fd, const struct sockaddr *addr, socklen_t len)
{
    feedd_service *svc = arg;
    feedd_guard_track(svc->guard, fd, addr, len);
    grpc_server_add_channel_from_fd(svc->server, fd, svc->health_creds);
}

/*
 * The TLS port: feedd's listener, its connections handed to gRPC with the
 * TLS credentials (handoff.h), and the plaintext Health port if asked for.
 */
static int bind_tls_port(feedd_service *svc, int *port)
{
    int rc = feedd_handoff_add_port(svc->server, &svc->handoff, svc->creds);
    if (rc != 0)
        FEED_LOGE("grpc: cannot add the TLS port (tls-cert and tls-key may not make a valid "
                  "pair)");
    if (rc == 0)
        rc = feedd_listener_open(svc->cfg->listen, "grpc", &svc->listener, port);
    if (rc == 0 && svc->cfg->health_listen[0]) {
        svc->health_creds = grpc_insecure_server_credentials_create();
        rc = svc->health_creds ? feedd_listener_open(svc->cfg->health_listen, "health",
                                                     &svc->health_listener, &svc->health_port)
                               : FEED_ENOMEM;
    }
    return rc;
}

/*
 * feedd's listener on the gRPC port (and the Health port): plaintext
 * connections go to gRPC by descriptor, TLS ones through the handoff.
 */
static int bind_own(feedd_service *svc, bool tls, int *port)
{
    if (tls)
        return bind_tls_port(svc, port);
    return feedd_listener_open(svc->cfg->listen, "grpc", &svc->listener, port);
}
#endif

/*
 * addr as gRPC takes it: feedd's listener also takes "PORT" and ":PORT"
 * (any IPv4 address), gRPC wants a host. FEED_EINVAL when it does not fit.
 */
static int grpc_addr(const char *addr, char *out, size_t cap)
{
    const char *colon = strrchr(addr, ':');
    int n = snprintf(out, cap, "%s%s%s", colon && colon != addr ? "" : "0.0.0.0",
                     colon ? "" : ":", addr);
    return n > 0 && (size_t)n < cap ? 0 : FEED_EINVAL;
}

/* One port on gRPC's own listener; *port gets the bound port. 0 or FEED_EIO. */
static int add_grpc_port(feedd_service *svc, const char *addr, grpc_server_credentials *creds,
                         const char *what, int *port)
{
    char a[300];
    int rc = grpc_addr(addr, a, sizeof a);
    *port = rc == 0 ? grpc_server_add_http2_port(svc->server, a, creds) : 0;
    if (*port <= 0) {
        FEED_LOGE("%s: gRPC cannot listen on %s", what, addr);
        rc = FEED_EIO;
    }
    return rc;
}

/* gRPC's own listener on the gRPC port and the Health port. */
static int bind_grpc(feedd_service *svc, int *port)
{
    int rc = add_grpc_port(svc, svc->cfg->listen, svc->creds, "grpc", port);
    if (rc == 0 && svc->cfg->health_listen[0]) {
        svc->health_creds = grpc_insecure_server_credentials_create();
        rc = svc->health_creds ? add_grpc_port(svc, svc->cfg->health_listen, svc->health_creds,
                                               "health", &svc->health_port)
                               : FEED_ENOMEM;
    }
    return rc;
}

/*
 * Load the token and the credentials, listen on cfg->listen; nothing is
 * accepted until the server (gRPC's listener, TLS) or feedd's listener
 * starts. 0, FEED_EINVAL, FEED_EIO or FEED_ENOMEM.
 */
int feedd_ports_bind(feedd_service *svc, int *port)
{
    const feedd_config *cfg = svc->cfg;
    char err[FEEDD_PATH_MAX + 200];
    int rc =
        feedd_token_load(cfg->auth_token_file, "auth-token-file", &svc->token, err, sizeof err);
    if (rc == 0)
        rc = feedd_tls_server_credentials(cfg->tls_cert, cfg->tls_key, cfg->tls_client_ca,
                                          &svc->creds, err, sizeof err);
    if (rc != 0) {
        FEED_LOGE("%s", rc == FEED_ENOMEM ? "out of memory" : err);
        goto out;
    }
    bool tls = svc->creds != NULL;
    if (tls)
        feedd_cert_check(cfg->tls_cert);
    else
        svc->creds = grpc_insecure_server_credentials_create();
    rc = FEED_ENOMEM;
    if (!svc->creds)
        goto out;
#ifdef FEEDD_GRPC151_CORE
    if (svc->own_listener) {
        rc = bind_own(svc, tls, port);
        goto out;
    }
#endif
    rc = bind_grpc(svc, port);
out:
    return rc;
}

/*
 * Whether feedd's own listener (and the transport guard) can take the gRPC
 * ports: asked for (--listener feedd), built (server/net/grpc151, feedd.cmake)
 * and the gRPC core loaded now the one it was built for. Says in the log
 * which listener runs and, on gRPC's, what limits apply.
 */
bool feedd_ports_choose_listener(const feedd_config *cfg)
{
    const char *core = grpc_version_string();
    bool own = strcmp(cfg->listener, "feedd") == 0;
#ifdef FEEDD_GRPC151_CORE
    if (own && strcmp(core, FEEDD_GRPC151_CORE) != 0) {
        FEED_LOGW("gRPC core %s is loaded; feedd was built against %s, whose internals its "
                  "own listener and transport guard (server/net/grpc151) rely on: running on "
                  "gRPC's listener instead",
                  core, FEEDD_GRPC151_CORE);
        own = false;
    }
#else
    if (own) {
        FEED_LOGW("feedd was built without server/net/grpc151 (gRPC core %s at build time; it is "
                  "written for core 29.0.0, gRPC 1.51): running on gRPC's listener",
                  FEEDD_GRPC_CORE_BUILT);
        own = false;
    }
#endif
    if (!own)
        FEED_LOGW("gRPC's own listener (gRPC core %s): no transport guard and no recovery "
                  "from descriptor exhaustion; gRPC's limits apply: messages up to "
                  "max-request-bytes, %u streams per connection, idle connections closed "
                  "after %u ms (0: never), resource quota %llu MiB (transport-memory; 0: "
                  "none), keepalive 30 s + 10 s",
                  core, cfg->max_streams, cfg->idle_timeout_ms,
                  (unsigned long long)(cfg->transport_memory >> 20));
    return own;
}

#ifdef FEEDD_GRPC151_CORE
/*
 * The transport memory guard over the connections feedd's listeners accept.
 * Its limit is what the process holds now (datasets' indexes, the cache's
 * tables, the workers) plus batch memory, the cache's and the share window's budgets and
 * --transport-memory. 0 or FEED_ENOMEM.
 */
static int start_guard(feedd_service *svc)
{
    const feedd_config *cfg = svc->cfg;
    if (!cfg->transport_memory)
        return 0;
    uint64_t rss = feedd_guard_rss();
    uint64_t limit = rss + cfg->max_memory + cfg->cache_bytes + cfg->share_window_bytes +
                     cfg->transport_memory;
    uint64_t burst = cfg->max_request_bytes + GUARD_BURST_EXTRA;
    FEED_LOGI("transport guard: a connection is cut once gRPC holds more than %llu KiB of it "
              "undelivered, before a call passed the token check or while memory is above %llu "
              "MiB (%llu now)",
              (unsigned long long)(burst >> 10), (unsigned long long)(limit >> 20),
              (unsigned long long)(rss >> 20));
    return feedd_guard_start(limit, burst, &svc->guard);
}

/* The guard, then feedd's listeners; after grpc_server_start. 0 or FEED_ENOMEM. */
int feedd_ports_start_own(feedd_service *svc)
{
    int rc = start_guard(svc);
    if (rc == 0)
        rc = feedd_listener_start(svc->listener, on_grpc_connection, svc);
    if (rc == 0 && svc->health_listener)
        rc = feedd_listener_start(svc->health_listener, on_health_connection, svc);
    return rc;
}
#endif

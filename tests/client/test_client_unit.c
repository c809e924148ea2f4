/*
 * Unit tests for libfeedclient's pure parts, no sockets: the epoch plan
 * (permutation, rank split, batches, determinism), fp16/bf16 rounding and
 * host normalisation against norm_ref.h, config validation, applying DNS
 * results to the server table (entries of vanished addresses reused), and
 * the server and bad-sample policies. The Batch reader is test_client_wire.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feed/rng.h"
#include "feedtest.h"
#include "norm_ref.h"
#include "normalize.h"
#include "plan.h"
#include "policy.h"
#include "client_impl.h"

/* The reference permutation (tests/support); never NULL here. */
static uint64_t *ref_perm(uint64_t n, uint64_t seed, uint32_t epoch)
{
    uint64_t *p = feed_test_ref_perm(n, seed, epoch);
    assert_non_null(p);
    return p;
}

static void test_plan_single_rank(void **state)
{
    (void)state;
    client_plan p;
    assert_int_equal(client_plan_build(&p, 1000, 42, 3, 0, 1, 64, false), 0);
    assert_int_equal(p.count, 1000);
    assert_int_equal(p.batches, 16); /* 15 full + one of 40 */
    uint64_t *want = ref_perm(1000, 42, 3);
    uint8_t seen[1000] = {0};
    for (uint64_t i = 0; i < p.count; i++) {
        assert_int_equal(p.samples[i], want[i]);
        seen[p.samples[i]]++;
    }
    for (int i = 0; i < 1000; i++)
        assert_int_equal(seen[i], 1);
    const uint32_t *first;
    uint32_t n;
    client_plan_batch(&p, 15, &first, &n);
    assert_int_equal(n, 40);
    assert_ptr_equal(first, p.samples + 960);
    free(want);
    client_plan_free(&p);

    assert_int_equal(client_plan_build(&p, 1000, 42, 3, 0, 1, 64, true), 0);
    assert_int_equal(p.batches, 15);
    client_plan_free(&p);
}

static void test_plan_determinism(void **state)
{
    (void)state;
    client_plan a, b, c, d;
    assert_int_equal(client_plan_build(&a, 500, 7, 0, 0, 1, 10, false), 0);
    assert_int_equal(client_plan_build(&b, 500, 7, 0, 0, 1, 10, false), 0);
    assert_int_equal(client_plan_build(&c, 500, 7, 1, 0, 1, 10, false), 0);
    assert_int_equal(client_plan_build(&d, 500, 8, 0, 0, 1, 10, false), 0);
    assert_memory_equal(a.samples, b.samples, 500 * sizeof(uint32_t));
    assert_memory_not_equal(a.samples, c.samples, 500 * sizeof(uint32_t));
    assert_memory_not_equal(a.samples, d.samples, 500 * sizeof(uint32_t));
    client_plan_free(&a);
    client_plan_free(&b);
    client_plan_free(&c);
    client_plan_free(&d);
}

/* DistributedSampler semantics: pad by wrapping, then rank r takes r, r+world, ... */
static void test_plan_ranks(void **state)
{
    (void)state;
    const uint64_t n = 1003;
    const uint32_t world = 4;
    uint64_t *perm = ref_perm(n, 99, 2);
    uint32_t counts[1003] = {0};
    uint64_t per_rank = (n + world - 1) / world;
    for (uint32_t r = 0; r < world; r++) {
        client_plan p;
        assert_int_equal(client_plan_build(&p, n, 99, 2, r, world, 32, false), 0);
        assert_int_equal(p.count, per_rank);
        for (uint64_t t = 0; t < p.count; t++) {
            assert_int_equal(p.samples[t], perm[(r + t * world) % n]);
            counts[p.samples[t]]++;
        }
        client_plan_free(&p);
    }
    /* Complete, and only the padding (the first total - n of the permutation) repeats. */
    uint64_t pad = per_rank * world - n;
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(counts[perm[i]], i < pad ? 2 : 1);
    free(perm);

    /* Divisible size: ranks are disjoint and complete. */
    uint32_t seen[1000] = {0};
    for (uint32_t r = 0; r < 4; r++) {
        client_plan p;
        assert_int_equal(client_plan_build(&p, 1000, 5, 0, r, 4, 16, true), 0);
        assert_int_equal(p.batches, 250 / 16);
        for (uint64_t t = 0; t < p.count; t++)
            seen[p.samples[t]]++;
        client_plan_free(&p);
    }
    for (int i = 0; i < 1000; i++)
        assert_int_equal(seen[i], 1);
}

static void test_plan_invalid(void **state)
{
    (void)state;
    client_plan p;
    assert_int_equal(client_plan_build(&p, 0, 1, 0, 0, 1, 8, false), FEED_EINVAL);
    assert_int_equal(client_plan_build(&p, 10, 1, 0, 2, 2, 8, false), FEED_EINVAL);
    assert_int_equal(client_plan_build(&p, 10, 1, 0, 0, 0, 8, false), FEED_EINVAL);
    assert_int_equal(client_plan_build(&p, 10, 1, 0, 0, 1, 0, false), FEED_EINVAL);
    assert_int_equal(client_plan_build(&p, (uint64_t)UINT32_MAX + 1, 1, 0, 0, 1, 8, false),
                     FEED_ETOOBIG);
    /* Fewer samples than a batch: one short batch, or none with drop_last. */
    assert_int_equal(client_plan_build(&p, 5, 1, 0, 0, 1, 8, true), 0);
    assert_int_equal(p.batches, 0);
    client_plan_free(&p);
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static void test_f16_bf16_rounding(void **state)
{
    (void)state;
    /* Specials and edges. */
    assert_int_equal(client_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(client_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(client_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(client_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(client_f32_to_f16(65519.0f), 0x7BFF);
    assert_int_equal(client_f32_to_f16(65520.0f), 0x7C00);
    assert_int_equal(client_f32_to_f16(INFINITY), 0x7C00);
    assert_int_equal(client_f32_to_f16(-INFINITY), 0xFC00);
    assert_true((client_f32_to_f16(NAN) & 0x7C00) == 0x7C00 && (client_f32_to_f16(NAN) & 0x3FF));
    assert_int_equal(client_f32_to_f16(0x1p-24f), 0x0001);   /* smallest subnormal */
    assert_int_equal(client_f32_to_f16(0x1p-25f), 0x0000);   /* tie → even (zero) */
    assert_int_equal(client_f32_to_f16(0x1.8p-24f), 0x0002); /* tie → even (2) */
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even gives 1. */
    assert_int_equal(client_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    assert_int_equal(client_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    assert_int_equal(client_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(client_f32_to_bf16(bits_f32(0x3F808000u)), 0x3F80); /* tie → even */
    assert_int_equal(client_f32_to_bf16(bits_f32(0x3F818000u)), 0x3F82); /* tie → even */
    assert_int_equal(client_f32_to_bf16(bits_f32(0x3F808001u)), 0x3F81);
    assert_true((client_f32_to_bf16(NAN) & 0x7F80) == 0x7F80 && (client_f32_to_bf16(NAN) & 0x7F));
    /* Pseudo-random floats across the fp16 range, both signs. */
    feed_rng r;
    feed_rng_init(&r, 1, 0, 0);
    for (int i = 0; i < 20000; i++) {
        uint32_t u = feed_rng_u32(&r);
        /* exponent in [-30, 16] so values span subnormal..overflow of fp16 */
        uint32_t e = 97 + (u >> 8) % 48;
        uint32_t bits = (u & 0x80000000u) | (e << 23) | (feed_rng_u32(&r) & 0x7FFFFFu);
        float f = bits_f32(bits);
        assert_int_equal(client_f32_to_f16(f), ref_f16(f));
        assert_int_equal(client_f32_to_bf16(f), ref_bf16(f));
    }
}

static void test_normalize_host_all(void **state)
{
    (void)state;
    const uint32_t n = 3, h = 5, w = 7;
    size_t count = (size_t)n * h * w * 3;
    uint8_t *raw = malloc(count);
    void *out = malloc(count * 4);
    assert_non_null(raw);
    assert_non_null(out);
    for (size_t i = 0; i < count; i++)
        raw[i] = (uint8_t)(i * 37 + 11);
    raw[0] = 0;
    raw[1] = 255;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    for (int dt = FEED_DTYPE_UINT8; dt <= FEED_DTYPE_FP32; dt++) {
        for (int lay = FEED_LAYOUT_NCHW; lay <= FEED_LAYOUT_NHWC; lay++) {
            memset(out, 0xAB, count * 4);
            client_normalize_host(raw, n, h, w, (feed_dtype)dt, (feed_layout)lay, mean, std, out);
            size_t first;
            size_t bad = ref_normalize_compare(raw, n, h, w, (feed_dtype)dt, (feed_layout)lay, mean,
                                               std, out, &first);
            if (bad)
                print_error("dtype %d layout %d: %zu mismatches, first at %zu\n", dt, lay, bad,
                            first);
            assert_int_equal(bad, 0);
        }
    }
    /* Spot check the formula itself: pixel 255, channel 0, fp32 NCHW. */
    client_normalize_host(raw, n, h, w, FEED_DTYPE_FP32, FEED_LAYOUT_NCHW, mean, std, out);
    float v;
    memcpy(&v, (uint8_t *)out + (size_t)h * w * 4 * 1, 4); /* channel 1, pixel 0 = raw[1] */
    assert_float_equal(v, (1.0f - 0.456f) / 0.224f, 1e-6);
    free(raw);
    free(out);
}

static void test_config_validation(void **state)
{
    (void)state;
    feed_loader_config c;
    feed_loader *l = (feed_loader *)&c;
    feed_loader_config_default(&c);
    assert_int_equal(c.batch_size, 256);
    assert_int_equal(c.window_per_server, 4);
    assert_int_equal(c.prefetch, 4);
    assert_true(c.ordered);
    assert_int_equal(c.transform.out_h, 224);
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL); /* no targets */
    assert_null(l);
    const char *t[] = {"127.0.0.1:1"};
    c.targets = t;
    c.num_targets = 1;
    c.dataset = "x";
    c.device = FEED_DEVICE_HOST;
    c.rank = 1; /* world 1 */
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.rank = 0;
    c.window_per_server = 65;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.window_per_server = 4;
    c.max_slots = c.prefetch; /* nothing left to fetch into while the caller holds prefetch */
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.max_slots = CLIENT_MAX_SLOTS + 1;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.max_slots = 0;
    c.demand_window_ms = CLIENT_DEMAND_WINDOW_MIN_MS - 1;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.demand_window_ms = CLIENT_DEMAND_WINDOW_MAX_MS + 1;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.demand_window_ms = 0;
    c.transform.out_h = 4;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.transform.out_h = 224;
    c.std[1] = 0.0f;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.std[1] = 0.224f;
    c.decode_lane = (feed_decode_lane)4;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.decode_lane = FEED_DECODE_LANE_CPU;
    c.decode_share = 1.5;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.decode_share = 0.5;
    c.decode_lane_threads = CLIENT_LANE_MAX_THREADS + 1;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.decode_lane_threads = 0;
    c.decode_lane_max_bytes = CLIENT_LANE_MIN_BYTES - 1;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.decode_lane_max_bytes = 0;
    /* The GPU lane needs the device path. */
    c.decode_lane = FEED_DECODE_LANE_GPU;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.decode_lane = FEED_DECODE_LANE_OFF;
    c.decode_share = 0.0;
    const char *bad_dns[] = {"dns:///nohostport"};
    c.targets = bad_dns;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    /* Nothing listens on port 1: unavailable, after the timeout, not a hang. */
    c.targets = t;
    c.unavailable_timeout_ms = 300;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EUNAVAILABLE);
    assert_null(l);
    feed_loader_close(NULL);
}

/* The decode lane's assignment: block `index` of the stream (seed, epoch, FEED_RNG_LANE_STREAM)
 * drawn here by stepping the stream from its start, below share x 2^16; the edges; shares
 * quantised to 1/65536; and a share of s taking about s of the samples. */
static void test_lane_assignment(void **state)
{
    (void)state;
    assert_int_equal(client_lane_share16(0.0), 0);
    assert_int_equal(client_lane_share16(1.0), 65536);
    assert_int_equal(client_lane_share16(0.25), 16384);
    assert_int_equal(client_lane_share16(1.0 / 131072.0 - 1e-12), 0);
    const uint64_t seed = 0x5eedull;
    for (uint32_t epoch = 0; epoch < 3; epoch++) {
        feed_rng r;
        feed_rng_init(&r, seed, epoch, FEED_RNG_LANE_STREAM);
        uint32_t taken = 0, differs = 0;
        for (uint64_t s = 0; s < 4000; s++) {
            uint32_t word = feed_rng_u32(&r);
            for (int k = 0; k < 3; k++)
                feed_rng_u32(&r);
            bool want = (word >> 16) < 32768u;
            assert_int_equal(client_lane_assigned(seed, epoch, s, 32768u), want);
            assert_false(client_lane_assigned(seed, epoch, s, 0));
            assert_true(client_lane_assigned(seed, epoch, s, 65536u));
            /* A smaller share takes a subset. */
            if (client_lane_assigned(seed, epoch, s, 8192u))
                assert_true(want);
            taken += want;
            differs += want != client_lane_assigned(seed, epoch + 1, s, 32768u);
        }
        assert_in_range(taken, 1800, 2200);
        assert_in_range(differs, 1800, 2200); /* the next epoch draws anew */
    }
}

static void test_resolve_parse(void **state)
{
    (void)state;
    char h[64], p[16];
    assert_int_equal(resolve_parse("dns:///feedd.ns.svc:7878", h, sizeof h, p, sizeof p), 0);
    assert_string_equal(h, "feedd.ns.svc");
    assert_string_equal(p, "7878");
    assert_int_equal(resolve_parse("dns:///[::1]:99", h, sizeof h, p, sizeof p), 0);
    assert_string_equal(h, "::1");
    assert_string_equal(p, "99");
    assert_int_equal(resolve_parse("dns:///host", h, sizeof h, p, sizeof p), FEED_EINVAL);
    assert_int_equal(resolve_parse("dns:///host:", h, sizeof h, p, sizeof p), FEED_EINVAL);
    assert_int_equal(resolve_parse("dns:///:80", h, sizeof h, p, sizeof p), FEED_EINVAL);
    assert_int_equal(resolve_parse("dns:///h:8x", h, sizeof h, p, sizeof p), FEED_EINVAL);
    assert_int_equal(resolve_parse("dns:///[::1]99", h, sizeof h, p, sizeof p), FEED_EINVAL);
    assert_int_equal(resolve_parse("host:80", h, sizeof h, p, sizeof p), FEED_EINVAL);
    char small[4];
    assert_int_equal(resolve_parse("dns:///longname:1", small, sizeof small, p, sizeof p),
                     FEED_EINVAL);
}

/* A hand-made slot of one piece in state ps, asked of (or landing from) s. */
static void one_piece(slot *sl, piece *pc, slot_state st, piece_state ps, server *s)
{
    memset(pc, 0, sizeof(*pc));
    pc->slot = sl;
    pc->state = ps;
    pc->server = s;
    sl->pieces = pc;
    sl->num_pieces = sl->max_pieces = 1;
    sl->state = st;
}

/* Applying DNS results: new addresses become servers, vanished ones are removed
 * and their in-flight batches re-issued, and a returning address is reused. */
static void test_servers_apply_dns(void **state)
{
    (void)state;
    loader *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->transport = &conn_transport; /* no calls or channels: dropping a server does nothing */
    char t0[] = "dns:///feedd:7878";
    char *targets[1] = {t0};
    l->targets = targets;
    l->cfg.num_targets = 1;
    dns_target d;
    memset(&d, 0, sizeof d);
    d.cfg_index = 0;
    d.addrs = calloc(CLIENT_MAX_SERVERS, sizeof(*d.addrs));
    l->dns = &d;
    l->num_dns = 1;

    strcpy(d.addrs[0], "ipv4:10.0.0.1:7878");
    strcpy(d.addrs[1], "ipv4:10.0.0.2:7878");
    d.num_addrs = 2;
    d.gen = 1;
    servers_apply_dns(l);
    assert_int_equal(l->num_servers, 2);
    assert_string_equal(l->servers[1].target, "ipv4:10.0.0.2:7878");
    assert_false(l->servers[0].removed);

    /* 10.0.0.1 is up with a batch in flight when it leaves DNS; 10.0.0.3 arrives. */
    l->servers[0].state = SRV_UP;
    l->num_slots = 1;
    piece pc;
    one_piece(&l->slots[0], &pc, SLOT_INFLIGHT, PIECE_INFLIGHT, &l->servers[0]);
    strcpy(d.addrs[0], "ipv4:10.0.0.3:7878");
    d.gen = 2;
    servers_apply_dns(l);
    assert_int_equal(l->num_servers, 3);
    assert_true(l->servers[0].removed);
    assert_int_equal(l->servers[0].state, SRV_DOWN);
    assert_false(l->servers[1].removed);
    assert_string_equal(l->servers[2].target, "ipv4:10.0.0.3:7878");
    assert_int_equal(l->slots[0].state, SLOT_PENDING);
    assert_null(pc.server);
    assert_int_equal(l->stats.reissued, 1);
    assert_int_equal(l->stats.failovers, 1);

    /* Nothing new: applying the same generation again changes nothing. */
    servers_apply_dns(l);
    assert_int_equal(l->num_servers, 3);
    /* It comes back: the same server entry is used again. */
    strcpy(d.addrs[2], "ipv4:10.0.0.1:7878");
    d.num_addrs = 3;
    d.gen = 3;
    servers_apply_dns(l);
    assert_int_equal(l->num_servers, 3);
    assert_false(l->servers[0].removed);
    free(d.addrs);
    free(l);
}

static void reuse_addr(char *out, uint32_t k)
{
    snprintf(out, CLIENT_TARGET_MAX + 1, "ipv4:10.%u.%u.1:7878", k / 256, k % 256);
}

/* The live entry for target, or NULL. */
static server *live_server(loader *l, const char *target)
{
    for (uint32_t k = 0; k < l->num_servers; k++) {
        if (!l->servers[k].removed && strcmp(l->servers[k].target, target) == 0)
            return &l->servers[k];
    }
    return NULL;
}

/* DNS says addresses [first, first + n). */
static void reuse_publish(loader *l, dns_target *d, uint32_t first, uint32_t n)
{
    for (uint32_t a = 0; a < n; a++)
        reuse_addr(d->addrs[a], first + a);
    d->num_addrs = n;
    d->gen++;
    servers_apply_dns(l);
}

/* Pods replaced one by one, far more distinct addresses than CLIENT_MAX_SERVERS over a job:
 * once the table is full, each new address takes the entry of one that left DNS, unless
 * something still refers to that entry (a batch being landed from it). */
static void test_resolve_reuse(void **state)
{
    (void)state;
    loader *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->transport = &conn_transport; /* no calls or channels: dropping a server does nothing */
    char t0[] = "dns:///feedd:7878";
    char *targets[1] = {t0};
    l->targets = targets;
    l->cfg.num_targets = 1;
    dns_target d;
    memset(&d, 0, sizeof d);
    d.addrs = calloc(CLIENT_MAX_SERVERS, sizeof(*d.addrs));
    assert_non_null(d.addrs);
    l->dns = &d;
    l->num_dns = 1;
    const uint32_t live = CLIENT_MAX_SERVERS - 8; /* the table fills after a few rounds */
    char want[CLIENT_TARGET_MAX + 1];

    /* 3 x CLIENT_MAX_SERVERS addresses in all, two replaced per round. */
    uint32_t first = 0;
    for (; first + live <= 3 * CLIENT_MAX_SERVERS; first += 2) {
        reuse_publish(l, &d, first, live);
        assert_true(l->num_servers <= CLIENT_MAX_SERVERS);
        for (uint32_t a = 0; a < live; a++) {
            reuse_addr(want, first + a);
            assert_non_null(live_server(l, want));
        }
    }
    assert_int_equal(l->num_servers, CLIENT_MAX_SERVERS);

    /* Round r: the two oldest leave. One is up with a batch in flight (re-issued, its entry
     * free again); a receiver is landing a batch from the other (its entry must stay). */
    reuse_addr(want, first);
    server *inflight = live_server(l, want);
    reuse_addr(want, first + 1);
    server *landing = live_server(l, want);
    assert_non_null(inflight);
    assert_non_null(landing);
    inflight->state = SRV_UP;
    l->num_slots = 2;
    piece pcs[2];
    one_piece(&l->slots[0], &pcs[0], SLOT_INFLIGHT, PIECE_INFLIGHT, inflight);
    one_piece(&l->slots[1], &pcs[1], SLOT_LANDING, PIECE_LANDING, landing);
    first += 2;
    reuse_publish(l, &d, first, live);
    assert_int_equal(l->slots[0].state, SLOT_PENDING);
    assert_null(pcs[0].server);
    assert_ptr_equal(pcs[1].server, landing);
    assert_true(landing->removed);
    reuse_addr(want, first - 1);
    assert_string_equal(landing->target, want); /* not reused while referenced */
    for (uint32_t a = 0; a < live; a++) {
        reuse_addr(want, first + a);
        assert_non_null(live_server(l, want));
    }
    assert_int_equal(l->num_servers, CLIENT_MAX_SERVERS);

    /* Eight more addresses than live entries can hold beside the landing one: seven removed
     * entries are taken, and the last new address finds no room until the landing is done. */
    char landing_target[CLIENT_TARGET_MAX + 1];
    snprintf(landing_target, sizeof landing_target, "%s", landing->target);
    reuse_publish(l, &d, first, live + 8);
    reuse_addr(want, first + live + 7);
    assert_null(live_server(l, want));
    assert_string_equal(landing->target, landing_target);
    assert_true(landing->removed);
    l->slots[1].state = SLOT_READY; /* landed */
    pcs[1].state = PIECE_DONE;
    d.gen++;
    servers_apply_dns(l);
    assert_ptr_equal(live_server(l, want), landing);
    assert_null(pcs[1].server); /* no stale pointer to the reused entry */
    for (uint32_t a = 0; a < live + 8; a++) {
        reuse_addr(want, first + a);
        assert_non_null(live_server(l, want));
    }
    assert_int_equal(l->num_servers, CLIENT_MAX_SERVERS);
    free(d.addrs);
    free(l);
}

/* Substitution takes the next good sample after each failed one, cyclically; FAIL and an
 * all-bad batch report FEED_EBADSAMPLE. */
static void test_bad_sample_policy(void **state)
{
    (void)state;
    enum { N = 6, SB = 4 };
    uint8_t status[N] = {FEED_SAMPLE_CORRUPT, FEED_SAMPLE_OK, FEED_SAMPLE_EMPTY,
                         FEED_SAMPLE_EMPTY,   FEED_SAMPLE_OK, FEED_SAMPLE_TRUNCATED};
    uint8_t raw[N * SB];
    int64_t labels[N];
    for (int i = 0; i < N; i++) {
        memset(raw + i * SB, 'a' + i, SB);
        labels[i] = 10 + i;
    }
    uint32_t sub = 99;
    assert_int_equal(
        policy_bad_samples(FEED_BAD_SAMPLE_SUBSTITUTE, N, status, labels, raw, SB, &sub), 0);
    assert_int_equal(sub, 4);
    const int want[N] = {1, 1, 4, 4, 4, 1}; /* 5 wraps around to 0, bad, then 1 */
    for (int i = 0; i < N; i++) {
        assert_int_equal(raw[i * SB], 'a' + want[i]);
        assert_int_equal(labels[i], 10 + want[i]);
    }
    assert_int_equal(policy_bad_samples(FEED_BAD_SAMPLE_FAIL, N, status, labels, raw, SB, &sub),
                     FEED_EBADSAMPLE);
    assert_int_equal(sub, 0);
    uint8_t all_bad[2] = {FEED_SAMPLE_IO_ERROR, FEED_SAMPLE_CORRUPT};
    assert_int_equal(
        policy_bad_samples(FEED_BAD_SAMPLE_SUBSTITUTE, 2, all_bad, labels, raw, SB, &sub),
        FEED_EBADSAMPLE);
    uint8_t good[2] = {FEED_SAMPLE_OK, FEED_SAMPLE_OK};
    assert_int_equal(policy_bad_samples(FEED_BAD_SAMPLE_FAIL, 2, good, labels, raw, SB, &sub), 0);
    assert_int_equal(sub, 0);
}

/* Which servers a loader uses, from their Describe alone. */
static void test_server_policy(void **state)
{
    (void)state;
    feed_loader_config c;
    feed_loader_config_default(&c);
    c.dataset = "imagenet";
    c.batch_size = 64;
    c.window_per_server = 8;
    char why[224];
    uint32_t window = 0;
    policy_server_info ok = {.served = true, .num_samples = 1000, .max_window = 4};
    assert_int_equal(policy_check_server(&c, 0, &ok, &window, why, sizeof why), POLICY_USE);
    assert_int_equal(window, 4); /* the server's limit wins */
    ok.max_window = 0;
    assert_int_equal(policy_check_server(&c, 1000, &ok, &window, why, sizeof why), POLICY_USE);
    assert_int_equal(window, 8);
    policy_server_info absent = {.served = false};
    assert_int_equal(policy_check_server(&c, 0, &absent, &window, why, sizeof why),
                     POLICY_NOT_SERVED);
    policy_server_info other = {.served = true, .num_samples = 999};
    assert_int_equal(policy_check_server(&c, 1000, &other, &window, why, sizeof why),
                     POLICY_SIZE_DIFFERS);
    assert_non_null(strstr(why, "999"));
    policy_server_info empty = {.served = true, .num_samples = 0};
    assert_int_equal(policy_check_server(&c, 0, &empty, &window, why, sizeof why),
                     POLICY_SIZE_DIFFERS);
    policy_server_info small = {.served = true, .num_samples = 1000, .max_batch_size = 32};
    assert_int_equal(policy_check_server(&c, 0, &small, &window, why, sizeof why),
                     POLICY_BATCH_TOO_LARGE);
    policy_server_info few_bytes = {
        .served = true, .num_samples = 1000, .max_batch_bytes = 64ull * 224 * 224 * 3 - 1};
    assert_int_equal(policy_check_server(&c, 0, &few_bytes, &window, why, sizeof why),
                     POLICY_BATCH_TOO_LARGE);
    few_bytes.max_batch_bytes++;
    assert_int_equal(policy_check_server(&c, 0, &few_bytes, &window, why, sizeof why), POLICY_USE);
}

/* A server's dataset fingerprint against the one the loader took from its first server. */
static void test_fingerprint_policy(void **state)
{
    (void)state;
    char why[600];
    const char *a = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const char *b = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    /* Nothing known yet, or the same: used. */
    assert_true(policy_check_fingerprint("d", "", "", "s1:1", a, why, sizeof why));
    assert_true(policy_check_fingerprint("d", a, "s1:1", "s2:2", a, why, sizeof why));
    /* An older feedd states none: used unchecked. */
    assert_true(policy_check_fingerprint("d", a, "s1:1", "old:3", "", why, sizeof why));
    /* Another: refused, the message naming both fingerprints and both servers. */
    assert_false(policy_check_fingerprint("d", a, "s1:1", "s2:2", b, why, sizeof why));
    assert_non_null(strstr(why, a));
    assert_non_null(strstr(why, b));
    assert_non_null(strstr(why, "s1:1"));
    assert_non_null(strstr(why, "s2:2"));
    /* Malformed (upper case, short, long): refused even as the first. */
    assert_false(policy_check_fingerprint(
        "d", "", "", "s2:2", "00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeeff",
        why, sizeof why));
    assert_false(policy_check_fingerprint("d", "", "", "s2:2", "0011", why, sizeof why));
    char longer[80];
    snprintf(longer, sizeof longer, "%s00", a);
    assert_false(policy_check_fingerprint("d", a, "s1:1", "s2:2", longer, why, sizeof why));
}

/* The loader's demand window (demand.h), scripted clock: the first window starts at the first
 * batch, a window closes only once it has run its length, waits are counted within it (a wait
 * still going on up to the close, the rest in the next window), and the last complete window
 * is what goes out. */
static void test_demand_window(void **state)
{
    (void)state;
    const uint64_t ms = 1000000;
    client_demand d;
    client_demand_init(&d, 1000, 7, 0);
    assert_int_equal(d.id, 7);
    assert_false(client_demand_due(&d, 0, 5000 * ms));
    /* The first batch after 400 ms of pipeline filling: the window starts there. */
    client_demand_consumed(&d, 0, 400 * ms, 32);
    assert_false(client_demand_due(&d, 0, 1300 * ms));
    /* 100 batches of 8 over the window, 250 ms of waiting in all. */
    for (int i = 1; i <= 100; i++) {
        uint64_t t = 400 * ms + (uint64_t)i * 9 * ms;
        client_demand_consumed(&d, i <= 50 ? t - 5 * ms : t, t, 8);
    }
    assert_true(client_demand_due(&d, 0, 1400 * ms));
    assert_int_equal(d.last_ms, 1000);
    assert_true(d.samples_per_second > 799.99 && d.samples_per_second < 800.01);
    assert_true(d.wait_fraction > 0.2499 && d.wait_fraction < 0.2501);
    /* A wait from 1900 ms still going on at 2400 ms: half the next window; its end is in the
     * window after and counts only from that window's start. */
    assert_true(client_demand_due(&d, 0, 1500 * ms));
    assert_true(d.samples_per_second > 799.99);
    assert_true(client_demand_due(&d, 1900 * ms, 2400 * ms));
    assert_true(d.wait_fraction > 0.4999 && d.wait_fraction < 0.5001);
    assert_true(d.samples_per_second == 0);
    client_demand_consumed(&d, 1900 * ms, 2900 * ms, 10);
    assert_true(client_demand_due(&d, 0, 3400 * ms));
    assert_true(d.wait_fraction > 0.4999 && d.wait_fraction < 0.5001);
    assert_true(d.samples_per_second > 9.99 && d.samples_per_second < 10.01);
    /* A random id when none is given, never 0. */
    client_demand_init(&d, 0, 0, 0);
    assert_true(d.id != 0);
    assert_int_equal(d.window_ns, 10000 * ms);
}

/* On the device path the steps' own GPU time says how much the window waited: a loop that
 * blocked in next() 66% of the time while the GPU was busy 66% of it waited 34%, not 66%;
 * with fewer than CLIENT_DEMAND_MIN_STEPS step times the host's waits count, as before; more
 * GPU time than the window (steps read late) is no waiting, not less than none. */
static void test_demand_gpu_steps(void **state)
{
    (void)state;
    const uint64_t ms = 1000000;
    client_demand d;
    client_demand_init(&d, 1000, 7, 0);
    client_demand_consumed(&d, 0, 0, 256);
    for (int i = 1; i <= 30; i++) {
        uint64_t t = (uint64_t)i * 33 * ms;
        client_demand_consumed(&d, t - 22 * ms, t, 256); /* 22 of every 33 ms in next() */
        client_demand_step(&d, 22 * ms);                 /* 22 of every 33 ms on the GPU */
    }
    assert_true(client_demand_due(&d, 0, 1000 * ms));
    assert_true(d.wait_fraction > 0.339 && d.wait_fraction < 0.341);
    /* Too few steps: the host's waits. */
    for (int i = 1; i <= 30; i++) {
        uint64_t t = 1000 * ms + (uint64_t)i * 33 * ms;
        client_demand_consumed(&d, t - 22 * ms, t, 256);
        if (i <= (int)CLIENT_DEMAND_MIN_STEPS - 1)
            client_demand_step(&d, 22 * ms);
    }
    assert_true(client_demand_due(&d, 0, 2000 * ms));
    assert_true(d.wait_fraction > 0.659 && d.wait_fraction < 0.661);
    for (uint32_t i = 0; i < CLIENT_DEMAND_MIN_STEPS; i++)
        client_demand_step(&d, 200 * ms);
    for (int i = 1; i <= 5; i++)
        client_demand_consumed(&d, 0, 2000 * ms + (uint64_t)i * 200 * ms, 256);
    assert_true(client_demand_due(&d, 0, 3000 * ms));
    assert_true(d.wait_fraction == 0);
    /* A caller ahead of the GPU leaves every other step untimed: the GPU's busy time is the
     * mean step time times the batches, not the sum of the steps read (which said 0.67). */
    for (int i = 1; i <= 30; i++) {
        uint64_t t = 3000 * ms + (uint64_t)i * 33 * ms;
        client_demand_consumed(&d, t - 22 * ms, t, 256);
        if (i % 2)
            client_demand_step(&d, 22 * ms);
    }
    assert_true(client_demand_due(&d, 0, 4000 * ms));
    assert_true(d.wait_fraction > 0.339 && d.wait_fraction < 0.341);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_single_rank),   cmocka_unit_test(test_plan_determinism),
        cmocka_unit_test(test_plan_ranks),         cmocka_unit_test(test_plan_invalid),
        cmocka_unit_test(test_f16_bf16_rounding),  cmocka_unit_test(test_normalize_host_all),
        cmocka_unit_test(test_config_validation),  cmocka_unit_test(test_resolve_parse),
        cmocka_unit_test(test_servers_apply_dns),  cmocka_unit_test(test_resolve_reuse),
        cmocka_unit_test(test_bad_sample_policy),  cmocka_unit_test(test_server_policy),
        cmocka_unit_test(test_fingerprint_policy), cmocka_unit_test(test_demand_window),
        cmocka_unit_test(test_demand_gpu_steps),   cmocka_unit_test(test_lane_assignment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

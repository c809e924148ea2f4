/*
 * The augmentation description's parser (see feed_augment_parse in
 * feed/augment.h). The text comes from the client, so it is bounded
 * (FEED_AUGMENT_MAX_TEXT bytes, FEED_AUGMENT_MAX_STEPS steps, 3 numbers a
 * value) and every number is checked, NaN included; a refusal names the step
 * and the parameter. Runs on the thread that opens a session (feedd) or a
 * loader (libfeedclient). Numbers are read with strtod in the C locale
 * neither process changes.
 *
 * Grammar (spaces anywhere between tokens):
 *   text  := step { ';' step } [ ';' ]
 *   step  := Name [ '(' [ param { ',' param } ] ')' ]
 *   param := key '=' ( number | word | '(' number { ',' number } ')' )
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/augment.h"
#include "feed/errors.h"

#define MAX_NUMS 3
#define MAX_BINS 1000u
#define RATIO_LIMIT 100.0
#define JITTER_LIMIT 100.0
#define HUE_LIMIT 0.5
#define PRESET "torchvision-v2-recipe"
/* references/classification/presets.py gives TrivialAugmentWide the recipe's interpolation. */
#define PRESET_TEXT "TrivialAugmentWide(interpolation=bilinear); RandomErasing(p=0.1)"

/* ImageNet's mean and std: RandomErasing's value is after Normalize with them. */
static const double MEAN[3] = {0.485, 0.456, 0.406};
static const double STD[3] = {0.229, 0.224, 0.225};

typedef struct parser {
    const char *p;
    char *msg;
    size_t cap;
    const char *step; /* the step's name, for messages */
} parser;

typedef struct value {
    int n; /* numbers read; 0 for a word */
    double num[MAX_NUMS];
    char word[32];
} value;

static int fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Message "augment: <step>.<what>", FEED_EINVAL. */
static int fail(parser *ps, const char *fmt, ...)
{
    if (ps->cap > 0) {
        int n = snprintf(ps->msg, ps->cap, "augment: %s", ps->step);
        if (n >= 0 && (size_t)n < ps->cap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->msg + n, ps->cap - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return FEED_EINVAL;
}

static void skip_space(parser *ps)
{
    while (*ps->p && isspace((unsigned char)*ps->p))
        ps->p++;
}

/* An identifier (letters, digits, '_', '-') into buf; its length, 0 if none or too long. */
static size_t read_word(parser *ps, char *buf, size_t cap)
{
    skip_space(ps);
    size_t n = 0;
    while (isalnum((unsigned char)ps->p[n]) || ps->p[n] == '_' || ps->p[n] == '-')
        n++;
    if (n == 0 || n >= cap)
        return 0;
    memcpy(buf, ps->p, n);
    buf[n] = '\0';
    ps->p += n;
    return n;
}

static int read_number(parser *ps, const char *key, double *out)
{
    skip_space(ps);
    char *end;
    double v = strtod(ps->p, &end);
    if (end == ps->p || !isfinite(v))
        return fail(ps, ".%s must be a finite number", key);
    ps->p = end;
    *out = v;
    return 0;
}

static int read_value(parser *ps, const char *key, value *v)
{
    skip_space(ps);
    v->n = 0;
    v->word[0] = '\0';
    if (*ps->p == '(' || *ps->p == '[') {
        char close = *ps->p == '(' ? ')' : ']';
        ps->p++;
        for (;;) {
            if (v->n == MAX_NUMS)
                return fail(ps, ".%s has more than %d numbers", key, MAX_NUMS);
            if (read_number(ps, key, &v->num[v->n]))
                return FEED_EINVAL;
            v->n++;
            skip_space(ps);
            if (*ps->p == close) {
                ps->p++;
                return 0;
            }
            if (*ps->p != ',')
                return fail(ps, ".%s: expected ',' or '%c'", key, close);
            ps->p++;
        }
    }
    if (isalpha((unsigned char)*ps->p))
        return read_word(ps, v->word, sizeof v->word) ? 0 : fail(ps, ".%s: word too long", key);
    if (read_number(ps, key, &v->num[0]))
        return FEED_EINVAL;
    v->n = 1;
    return 0;
}

/* A word where numbers belong ("nan", "inf", "random"): refused by name. */
static int word_refused(parser *ps, const char *key, const value *v)
{
    return v->n == 0 ? fail(ps, ".%s must be a number, not '%s'", key, v->word) : 0;
}

/* A whole number in [lo, hi]. */
static int get_uint(parser *ps, const char *key, const value *v, uint32_t lo, uint32_t hi,
                    uint32_t *out)
{
    if (word_refused(ps, key, v))
        return FEED_EINVAL;
    if (v->n != 1 || v->num[0] != floor(v->num[0]) || v->num[0] < lo || v->num[0] > hi)
        return fail(ps, ".%s must be a whole number in [%u, %u]", key, lo, hi);
    *out = (uint32_t)v->num[0];
    return 0;
}

/* A pair (a, b) with lo <= a <= b <= hi (lo_open: lo < a). */
static int get_pair(parser *ps, const char *key, const value *v, double lo, bool lo_open, double hi,
                    double out[2])
{
    if (word_refused(ps, key, v))
        return FEED_EINVAL;
    if (v->n != 2 || !(lo_open ? v->num[0] > lo : v->num[0] >= lo) || !(v->num[0] <= v->num[1]) ||
        !(v->num[1] <= hi))
        return fail(ps, ".%s must be (min, max) with %g %s min <= max <= %g", key, lo,
                    lo_open ? "<" : "<=", hi);
    out[0] = v->num[0];
    out[1] = v->num[1];
    return 0;
}

/* One or three numbers, each through f into a pixel in [0, 255]. */
static int get_fill(parser *ps, const char *key, const value *v, bool normalised, uint8_t out[3])
{
    if (word_refused(ps, key, v))
        return FEED_EINVAL;
    if (v->n != 1 && v->n != 3)
        return fail(ps, ".%s must be one number or three", key);
    for (int c = 0; c < 3; c++) {
        double x = v->num[v->n == 3 ? c : 0];
        double px = normalised ? (x * STD[c] + MEAN[c]) * 255.0 : x;
        if (!(px >= -0.5 && px < 255.5))
            return fail(ps, ".%s gives a pixel outside [0, 255]%s", key,
                        normalised ? " (after ImageNet's Normalize)" : "");
        out[c] = (uint8_t)lrint(px < 0 ? 0 : px > 255 ? 255 : px);
    }
    return 0;
}

/* ColorJitter's factors: x >= 0 -> [max(0, 1 - x), 1 + x] (hue: [-x, x]), or a pair. */
static int get_jitter(parser *ps, const char *key, const value *v, bool hue, double out[2])
{
    double lim = hue ? HUE_LIMIT : JITTER_LIMIT;
    if (word_refused(ps, key, v))
        return FEED_EINVAL;
    if (v->n == 1) {
        double x = v->num[0];
        if (!(x >= 0.0 && x <= lim))
            return fail(ps, ".%s must be in [0, %g] (or a pair)", key, lim);
        out[0] = hue ? -x : fmax(1.0 - x, 0.0);
        out[1] = hue ? x : 1.0 + x;
        return 0;
    }
    return get_pair(ps, key, v, hue ? -HUE_LIMIT : 0.0, false, lim, out);
}

static int set_param(parser *ps, feed_augment_step *s, const char *key, const value *v)
{
    bool has_bins = s->kind == FEED_AUGMENT_TRIVIAL_WIDE || s->kind == FEED_AUGMENT_RAND;
    if (has_bins && strcmp(key, "num_magnitude_bins") == 0)
        return get_uint(ps, key, v, 2, MAX_BINS, &s->num_magnitude_bins);
    if (s->kind == FEED_AUGMENT_RAND && strcmp(key, "num_ops") == 0)
        return get_uint(ps, key, v, 0, FEED_AUGMENT_MAX_RAND_OPS, &s->num_ops);
    if (s->kind == FEED_AUGMENT_RAND && strcmp(key, "magnitude") == 0)
        return get_uint(ps, key, v, 0, MAX_BINS - 1, &s->magnitude);
    bool geometric = has_bins || s->kind == FEED_AUGMENT_AUTO;
    if (geometric && strcmp(key, "interpolation") == 0) {
        if (strcmp(v->word, "nearest") != 0 && strcmp(v->word, "bilinear") != 0 &&
            strcmp(v->word, "NEAREST") != 0 && strcmp(v->word, "BILINEAR") != 0)
            return fail(ps, ".interpolation must be nearest or bilinear");
        s->bilinear = v->word[0] == 'b' || v->word[0] == 'B';
        return 0;
    }
    if (s->kind == FEED_AUGMENT_AUTO && strcmp(key, "policy") == 0) {
        if (strcmp(v->word, "imagenet") != 0 && strcmp(v->word, "IMAGENET") != 0)
            return fail(ps, ".policy must be imagenet (the only policy served)");
        return 0;
    }
    if (s->kind == FEED_AUGMENT_COLOR_JITTER) {
        static const char *const names[4] = {"brightness", "contrast", "saturation", "hue"};
        for (int k = 0; k < 4; k++)
            if (strcmp(key, names[k]) == 0)
                return get_jitter(ps, key, v, k == 3, s->jitter[k]);
    }
    if (s->kind == FEED_AUGMENT_ERASING) {
        if (strcmp(key, "p") == 0) {
            if (word_refused(ps, key, v))
                return FEED_EINVAL;
            if (v->n != 1 || !(v->num[0] >= 0.0 && v->num[0] <= 1.0))
                return fail(ps, ".p must be in [0, 1]");
            s->p = v->num[0];
            return 0;
        }
        if (strcmp(key, "scale") == 0)
            return get_pair(ps, key, v, 0.0, true, 1.0, s->scale);
        if (strcmp(key, "ratio") == 0)
            return get_pair(ps, key, v, 1.0 / RATIO_LIMIT, false, RATIO_LIMIT, s->ratio);
        if (strcmp(key, "value") == 0) {
            if (strcmp(v->word, "random") == 0)
                return fail(ps, ".value: 'random' (normal noise after Normalize) has no uint8 "
                                "pixels; give numbers");
            return get_fill(ps, key, v, true, s->fill);
        }
        if (strcmp(key, "fill") == 0)
            return get_fill(ps, key, v, false, s->fill);
    }
    return fail(ps, ": unknown parameter '%s'", key);
}

static const struct {
    const char *name;
    feed_augment_kind kind;
} KINDS[] = {
    {"TrivialAugmentWide", FEED_AUGMENT_TRIVIAL_WIDE},
    {"RandAugment", FEED_AUGMENT_RAND},
    {"AutoAugment", FEED_AUGMENT_AUTO},
    {"RandomErasing", FEED_AUGMENT_ERASING},
    {"ColorJitter", FEED_AUGMENT_COLOR_JITTER},
};

static void step_defaults(feed_augment_step *s, feed_augment_kind kind)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->num_ops = 2;
    s->magnitude = 9;
    s->num_magnitude_bins = 31;
    s->p = 0.5;
    s->scale[0] = 0.02;
    s->scale[1] = 0.33;
    s->ratio[0] = 0.3;
    s->ratio[1] = 3.3;
    for (int c = 0; c < 3; c++)
        s->fill[c] = (uint8_t)lrint(MEAN[c] * 255.0);
    for (int k = 0; k < 3; k++)
        s->jitter[k][0] = s->jitter[k][1] = 1.0;
}

static int parse_step(parser *ps, feed_augment_step *s)
{
    char name[40];
    ps->step = "";
    if (!read_word(ps, name, sizeof name))
        return fail(ps, "expected an augmentation name at '%.16s'", ps->p);
    size_t k = 0;
    while (k < sizeof KINDS / sizeof KINDS[0] && strcmp(KINDS[k].name, name) != 0)
        k++;
    if (k == sizeof KINDS / sizeof KINDS[0])
        return fail(ps,
                    "unknown augmentation '%s' (TrivialAugmentWide, RandAugment, "
                    "AutoAugment, ColorJitter, RandomErasing or " PRESET ")",
                    name);
    ps->step = KINDS[k].name;
    step_defaults(s, KINDS[k].kind);
    skip_space(ps);
    if (*ps->p != '(')
        return 0;
    ps->p++;
    skip_space(ps);
    while (*ps->p != ')') {
        char key[40];
        value v;
        if (!read_word(ps, key, sizeof key))
            return fail(ps, ": expected a parameter name");
        skip_space(ps);
        if (*ps->p != '=')
            return fail(ps, ".%s: expected '='", key);
        ps->p++;
        if (read_value(ps, key, &v) || set_param(ps, s, key, &v))
            return FEED_EINVAL;
        skip_space(ps);
        if (*ps->p == ',')
            ps->p++;
        else if (*ps->p != ')')
            return fail(ps, ".%s: expected ',' or ')'", key);
        skip_space(ps);
    }
    ps->p++;
    if (s->kind == FEED_AUGMENT_RAND && s->magnitude >= s->num_magnitude_bins)
        return fail(ps, ".magnitude must be below num_magnitude_bins (%u)", s->num_magnitude_bins);
    return 0;
}

int feed_augment_parse(const char *text, feed_augment *out, char *msg, size_t msg_cap)
{
    parser ps = {.p = text ? text : "", .msg = msg, .cap = msg_cap, .step = ""};
    int rc = 0;
    if (msg_cap > 0)
        msg[0] = '\0';
    out->num_steps = 0;
    if (strlen(ps.p) > FEED_AUGMENT_MAX_TEXT)
        return fail(&ps, "description longer than %d bytes", FEED_AUGMENT_MAX_TEXT);
    skip_space(&ps);
    if (strncmp(ps.p, PRESET, strlen(PRESET)) == 0) {
        const char *rest = ps.p + strlen(PRESET);
        while (*rest && isspace((unsigned char)*rest))
            rest++;
        if (*rest == '\0')
            ps.p = PRESET_TEXT;
    }
    skip_space(&ps);
    while (*ps.p && rc == 0) {
        if (out->num_steps == FEED_AUGMENT_MAX_STEPS) {
            rc = fail(&ps, "more than %d steps", FEED_AUGMENT_MAX_STEPS);
            break;
        }
        rc = parse_step(&ps, &out->steps[out->num_steps]);
        if (rc == 0) {
            out->num_steps++;
            skip_space(&ps);
            if (*ps.p == ';')
                ps.p++;
            else if (*ps.p)
                rc = fail(&ps, ": expected ';' between steps");
            skip_space(&ps);
        }
    }
    if (rc != 0)
        out->num_steps = 0;
    return rc;
}

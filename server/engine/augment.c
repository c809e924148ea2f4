/*
 * Augmentation policies over the op table (see augment.h): what each step
 * draws, in torchvision's order, and the text description's parser. Pure
 * functions of their arguments; run on the engine's worker thread (apply) or
 * the thread opening a session (parse).
 *
 * Draws per step, from the sample's stream at FEED_AUGMENT_CTR, in order:
 *   TrivialAugmentWide: op = below(14); bin = below(bins) if the op has
 *     magnitudes; sign = below(2) if the op is signed (1: negate).
 *   RandAugment: num_ops times: op = below(14); sign = below(2) if signed.
 *   AutoAugment: policy = below(25); u0, u1 uniform; s0, s1 = below(2);
 *     sub-op i runs when u_i <= its probability, negated when s_i == 0.
 *   ColorJitter: a permutation of the 4 adjustments (Fisher-Yates, 3 draws),
 *     then a uniform factor for each not skipped, in the order brightness,
 *     contrast, saturation, hue; applied in the permutation's order.
 *   RandomErasing: u uniform, erase when u < p; then up to 10 attempts of
 *     area = uniform in scale, log ratio uniform in log ratio, h and w
 *     rounded half to even, kept when h < H and w < W; top = below(H - h + 1),
 *     left = below(W - w + 1).
 * torchvision draws the same variables from the same distributions (torch's
 * generator), so the distributions agree while the streams differ.
 *
 * Magnitudes are torchvision's bins, computed as torch.linspace does in
 * float32 (start + i * step below the halfway index, end - (n - 1 - i) * step
 * from it).
 */
#include "augment.h"

#include <math.h>
#include <string.h>

#define ERASE_ATTEMPTS 10
/* The standard space's ops (RandAugment, AutoAugment) and the wide one's: Identity..Equalize. */
#define SPACE_OPS 14u

/* torch.linspace(start, end, n)[i] in float32. */
static double linspace(float start, float end, uint32_t n, uint32_t i)
{
    if (n < 2)
        return start;
    float step = (end - start) / (float)(n - 1);
    return i < n / 2 ? start + step * (float)i : end - step * (float)(n - 1 - i);
}

static bool op_signed(feed_aug_op op)
{
    return op >= FEED_AUG_SHEAR_X && op <= FEED_AUG_SHARPNESS;
}

static bool op_has_magnitude(feed_aug_op op)
{
    return op >= FEED_AUG_SHEAR_X && op <= FEED_AUG_SOLARIZE;
}

/*
 * Unsigned magnitude of bin i of n: wide = TrivialAugmentWide's space, else
 * the standard one (RandAugment, AutoAugment), whose translations scale with
 * the image (h x w).
 */
static double magnitude_of(feed_aug_op op, bool wide, uint32_t n, uint32_t i, uint32_t h,
                           uint32_t w)
{
    float big = wide ? 0.99f : 0.9f;
    switch (op) {
    case FEED_AUG_SHEAR_X:
    case FEED_AUG_SHEAR_Y:
        return linspace(0.0f, wide ? 0.99f : 0.3f, n, i);
    case FEED_AUG_TRANSLATE_X:
        return linspace(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * w), n, i);
    case FEED_AUG_TRANSLATE_Y:
        return linspace(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * h), n, i);
    case FEED_AUG_ROTATE:
        return linspace(0.0f, wide ? 135.0f : 30.0f, n, i);
    case FEED_AUG_BRIGHTNESS:
    case FEED_AUG_COLOR:
    case FEED_AUG_CONTRAST:
    case FEED_AUG_SHARPNESS:
        return linspace(0.0f, big, n, i);
    case FEED_AUG_POSTERIZE: {
        float div = (float)((n - 1) / (wide ? 6.0 : 4.0));
        return 8.0 - (double)nearbyintf((float)i / div);
    }
    case FEED_AUG_SOLARIZE:
        return linspace(255.0f, 0.0f, n, i);
    default:
        return 0.0;
    }
}

/* AutoAugment's ImageNet policy: (op, probability, bin or -1) pairs. */
typedef struct aa_sub {
    feed_aug_op op;
    double p;
    int bin;
} aa_sub;

static const aa_sub AA_IMAGENET[25][2] = {
    {{FEED_AUG_POSTERIZE, 0.4, 8}, {FEED_AUG_ROTATE, 0.6, 9}},
    {{FEED_AUG_SOLARIZE, 0.6, 5}, {FEED_AUG_AUTOCONTRAST, 0.6, -1}},
    {{FEED_AUG_EQUALIZE, 0.8, -1}, {FEED_AUG_EQUALIZE, 0.6, -1}},
    {{FEED_AUG_POSTERIZE, 0.6, 7}, {FEED_AUG_POSTERIZE, 0.6, 6}},
    {{FEED_AUG_EQUALIZE, 0.4, -1}, {FEED_AUG_SOLARIZE, 0.2, 4}},
    {{FEED_AUG_EQUALIZE, 0.4, -1}, {FEED_AUG_ROTATE, 0.8, 8}},
    {{FEED_AUG_SOLARIZE, 0.6, 3}, {FEED_AUG_EQUALIZE, 0.6, -1}},
    {{FEED_AUG_POSTERIZE, 0.8, 5}, {FEED_AUG_EQUALIZE, 1.0, -1}},
    {{FEED_AUG_ROTATE, 0.2, 3}, {FEED_AUG_SOLARIZE, 0.6, 8}},
    {{FEED_AUG_EQUALIZE, 0.6, -1}, {FEED_AUG_POSTERIZE, 0.4, 6}},
    {{FEED_AUG_ROTATE, 0.8, 8}, {FEED_AUG_COLOR, 0.4, 0}},
    {{FEED_AUG_ROTATE, 0.4, 9}, {FEED_AUG_EQUALIZE, 0.6, -1}},
    {{FEED_AUG_EQUALIZE, 0.0, -1}, {FEED_AUG_EQUALIZE, 0.8, -1}},
    {{FEED_AUG_INVERT, 0.6, -1}, {FEED_AUG_EQUALIZE, 1.0, -1}},
    {{FEED_AUG_COLOR, 0.6, 4}, {FEED_AUG_CONTRAST, 1.0, 8}},
    {{FEED_AUG_ROTATE, 0.8, 8}, {FEED_AUG_COLOR, 1.0, 2}},
    {{FEED_AUG_COLOR, 0.8, 8}, {FEED_AUG_SOLARIZE, 0.8, 7}},
    {{FEED_AUG_SHARPNESS, 0.4, 7}, {FEED_AUG_INVERT, 0.6, -1}},
    {{FEED_AUG_SHEAR_X, 0.6, 5}, {FEED_AUG_EQUALIZE, 1.0, -1}},
    {{FEED_AUG_COLOR, 0.4, 0}, {FEED_AUG_EQUALIZE, 0.6, -1}},
    {{FEED_AUG_EQUALIZE, 0.4, -1}, {FEED_AUG_SOLARIZE, 0.2, 4}},
    {{FEED_AUG_SOLARIZE, 0.6, 5}, {FEED_AUG_AUTOCONTRAST, 0.6, -1}},
    {{FEED_AUG_INVERT, 0.6, -1}, {FEED_AUG_EQUALIZE, 1.0, -1}},
    {{FEED_AUG_COLOR, 0.6, 4}, {FEED_AUG_CONTRAST, 1.0, 8}},
    {{FEED_AUG_EQUALIZE, 0.8, -1}, {FEED_AUG_EQUALIZE, 0.6, -1}},
};
#define AA_BINS 10u

/* torch.randperm(4) in distribution: Fisher-Yates. */
static void draw_permutation(feed_rng *rng, int perm[4])
{
    for (int i = 0; i < 4; i++)
        perm[i] = i;
    for (int i = 3; i > 0; i--) {
        int j = (int)feed_rng_below(rng, (uint64_t)i + 1);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static bool jitter_skipped(const feed_augment_step *s, int k)
{
    double centre = k == FEED_AUG_ADJ_HUE ? 0.0 : 1.0;
    return s->jitter[k][0] == centre && s->jitter[k][1] == centre;
}

static int draw_jitter(const feed_augment_step *s, feed_rng *rng, int *perm, double factors[4])
{
    draw_permutation(rng, perm);
    for (int k = 0; k < 4; k++)
        factors[k] = jitter_skipped(s, k) ? NAN
                                          : s->jitter[k][0] + (s->jitter[k][1] - s->jitter[k][0]) *
                                                                  feed_rng_uniform(rng);
    return 4;
}

static int draw_erasing(const feed_augment_step *s, feed_rng *rng, uint32_t h, uint32_t w,
                        uint32_t box[4])
{
    if (!(feed_rng_uniform(rng) < s->p))
        return 0;
    double area = (double)h * w, lr0 = log(s->ratio[0]), lr1 = log(s->ratio[1]);
    for (int attempt = 0; attempt < ERASE_ATTEMPTS; attempt++) {
        double ea = area * (s->scale[0] + (s->scale[1] - s->scale[0]) * feed_rng_uniform(rng));
        double ar = exp(lr0 + (lr1 - lr0) * feed_rng_uniform(rng));
        double eh = rint(sqrt(ea * ar)), ew = rint(sqrt(ea / ar));
        if (!(eh < h && ew < w))
            continue;
        box[2] = (uint32_t)eh;
        box[3] = (uint32_t)ew;
        box[0] = (uint32_t)feed_rng_below(rng, (uint64_t)(h - box[2]) + 1);
        box[1] = (uint32_t)feed_rng_below(rng, (uint64_t)(w - box[3]) + 1);
        return 1;
    }
    return 0;
}

int feed_augment_draw(const feed_augment_step *s, feed_rng *rng, uint32_t h, uint32_t w,
                      feed_aug_op *ops, int *bins, int *signs, uint32_t box[4], double factors[4])
{
    int n = 0;
    switch (s->kind) {
    case FEED_AUGMENT_TRIVIAL_WIDE: {
        feed_aug_op op = (feed_aug_op)feed_rng_below(rng, SPACE_OPS);
        ops[0] = op;
        bins[0] = op_has_magnitude(op) ? (int)feed_rng_below(rng, s->num_magnitude_bins) : -1;
        signs[0] = op_signed(op) && feed_rng_below(rng, 2) ? -1 : 1;
        n = 1;
        break;
    }
    case FEED_AUGMENT_RAND:
        for (uint32_t k = 0; k < s->num_ops; k++) {
            feed_aug_op op = (feed_aug_op)feed_rng_below(rng, SPACE_OPS);
            ops[k] = op;
            bins[k] = op_has_magnitude(op) ? (int)s->magnitude : -1;
            signs[k] = op_signed(op) && feed_rng_below(rng, 2) ? -1 : 1;
        }
        n = (int)s->num_ops;
        break;
    case FEED_AUGMENT_AUTO: {
        const aa_sub *pol = AA_IMAGENET[feed_rng_below(rng, 25)];
        double u[2] = {feed_rng_uniform(rng), feed_rng_uniform(rng)};
        int sg[2] = {(int)feed_rng_below(rng, 2), (int)feed_rng_below(rng, 2)};
        for (int i = 0; i < 2; i++)
            if (u[i] <= pol[i].p) {
                ops[n] = pol[i].op;
                bins[n] = pol[i].bin;
                signs[n] = op_signed(pol[i].op) && sg[i] == 0 ? -1 : 1;
                n++;
            }
        break;
    }
    case FEED_AUGMENT_ERASING:
        n = draw_erasing(s, rng, h, w, box);
        break;
    case FEED_AUGMENT_COLOR_JITTER:
        n = draw_jitter(s, rng, bins, factors);
        break;
    }
    return n;
}

void feed_augment_apply(const feed_augment *a, feed_aug_image *img, uint64_t seed, uint32_t epoch,
                        uint64_t sample_index)
{
    if (a->num_steps == 0)
        return;
    feed_rng rng;
    feed_rng_init(&rng, seed, epoch, sample_index);
    rng.ctr[0] = FEED_AUGMENT_CTR;
    for (uint32_t k = 0; k < a->num_steps; k++) {
        const feed_augment_step *s = &a->steps[k];
        feed_aug_op ops[FEED_AUGMENT_MAX_RAND_OPS];
        int bins[FEED_AUGMENT_MAX_RAND_OPS], signs[FEED_AUGMENT_MAX_RAND_OPS];
        uint32_t box[4];
        double factors[4];
        int n = feed_augment_draw(s, &rng, img->h, img->w, ops, bins, signs, box, factors);
        if (s->kind == FEED_AUGMENT_COLOR_JITTER) {
            for (int i = 0; i < n; i++)
                if (!isnan(factors[bins[i]]))
                    feed_aug_adjust((feed_aug_adjust_kind)bins[i], factors[bins[i]], img);
            continue;
        }
        if (s->kind == FEED_AUGMENT_ERASING) {
            for (uint32_t y = box[0]; n && y < box[0] + box[2]; y++)
                for (uint32_t x = box[1]; x < box[1] + box[3]; x++)
                    memcpy(img->px + ((size_t)y * img->w + x) * 3, s->fill, 3);
            continue;
        }
        bool wide = s->kind == FEED_AUGMENT_TRIVIAL_WIDE;
        img->bilinear = s->bilinear;
        uint32_t nbins = s->kind == FEED_AUGMENT_AUTO ? AA_BINS : s->num_magnitude_bins;
        for (int i = 0; i < n; i++) {
            double mag = bins[i] < 0
                             ? 0.0
                             : magnitude_of(ops[i], wide, nbins, (uint32_t)bins[i], img->h, img->w);
            feed_aug_apply_op(ops[i], mag * signs[i], img);
        }
        img->bilinear = false;
    }
}

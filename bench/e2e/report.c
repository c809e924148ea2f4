/*
 * feed-bench's outputs; see report.h. CSV and JSON are written by hand (no
 * library): every string written is ours or a path, escaped for JSON.
 */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "feed/errors.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double quantile(const double *v, size_t n, double q, double *tmp)
{
    memcpy(tmp, v, n * sizeof *v);
    qsort(tmp, n, sizeof *tmp, cmp_double);
    /* nearest rank: the smallest value with at least q of the samples at or below it */
    size_t rank = (size_t)ceil(q * (double)n);
    return tmp[rank ? rank - 1 : 0];
}

void report_summarise(run_result *r)
{
    size_t w = r->warmup_batches < r->nrecords ? r->warmup_batches : r->nrecords;
    size_t n = r->nrecords - w;
    const batch_record *rec = r->records + w;
    double *waits = NULL, *tmp = NULL;
    double step_sum = 0.0, wait_sum = 0.0, wait_max = 0.0;

    r->images_per_s = r->wall_s > 0 ? (double)r->images / r->wall_s : 0.0;
    if (n > 0) {
        waits = malloc(n * sizeof *waits);
        tmp = malloc(n * sizeof *tmp);
    }
    if (waits && tmp) {
        for (size_t i = 0; i < n; i++) {
            waits[i] = rec[i].wait_ms;
            step_sum += rec[i].step_ms;
            wait_sum += rec[i].wait_ms;
            wait_max = rec[i].wait_ms > wait_max ? rec[i].wait_ms : wait_max;
        }
        r->step_ms_mean = step_sum / (double)n;
        r->gpu_busy = r->wall_s > 0 ? step_sum / 1000.0 / r->wall_s : 0.0;
        r->wait_mean_ms = wait_sum / (double)n;
        r->wait_p50_ms = quantile(waits, n, 0.50, tmp);
        r->wait_p99_ms = quantile(waits, n, 0.99, tmp);
        r->wait_max_ms = wait_max;
    }
    free(waits);
    free(tmp);

    size_t k = r->nrecords < 10 ? r->nrecords : 10;
    double first = 0.0, last = 0.0;
    for (size_t i = 0; i < k; i++) {
        first += r->records[i].loss;
        last += r->records[r->nrecords - 1 - i].loss;
    }
    r->loss_first = k ? first / (double)k : 0.0;
    r->loss_last = k ? last / (double)k : 0.0;

    r->nvml_ok = r->nnvml > 0;
    if (r->nvml_ok) {
        double u = 0.0, umin = 100.0, rx = 0.0;
        size_t nrx = 0;
        for (size_t i = 0; i < r->nnvml; i++) {
            u += r->nvml[i].gpu_util;
            umin = r->nvml[i].gpu_util < umin ? r->nvml[i].gpu_util : umin;
            if (r->nvml[i].pcie_rx_mbps >= 0) {
                rx += r->nvml[i].pcie_rx_mbps;
                nrx++;
            }
        }
        r->nvml_util_mean = u / (double)r->nnvml;
        r->nvml_util_min = umin;
        r->pcie_rx_mbps_mean = nrx ? rx / (double)nrx : -1.0;
    }
    double sm = 0.0, tensor = 0.0, dram = 0.0;
    size_t ngpm = 0;
    r->gpu_mem_used_max_mib = -1.0;
    for (size_t i = 0; i < r->nnvml; i++) {
        const nvml_sample *s = &r->nvml[i];
        if (s->mem_used_mib > r->gpu_mem_used_max_mib)
            r->gpu_mem_used_max_mib = s->mem_used_mib;
        if (s->sm_active_pct >= 0 && s->tensor_active_pct >= 0 && s->dram_bw_pct >= 0) {
            sm += s->sm_active_pct;
            tensor += s->tensor_active_pct;
            dram += s->dram_bw_pct;
            ngpm++;
        }
    }
    r->gpm_ok = ngpm > 0;
    r->sm_active_mean = ngpm ? sm / (double)ngpm : 0.0;
    r->tensor_active_mean = ngpm ? tensor / (double)ngpm : 0.0;
    r->dram_bw_mean = ngpm ? dram / (double)ngpm : 0.0;
    r->loader_cores = r->wall_s > 0 ? r->loader_cpu_s / r->wall_s : 0.0;
    r->server_cores = r->wall_s > 0 ? r->server_cpu_s / r->wall_s : 0.0;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* A number, or null when the measurement does not exist (no NVML, no spawned servers). */
static void json_num(FILE *f, bool known, double v)
{
    if (known && isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

static void csv_num(FILE *f, bool known, double v)
{
    if (known && isfinite(v))
        fprintf(f, "%.6g", v);
}

static FILE *open_in(const char *dir, const char *name, char *err, size_t err_cap)
{
    char path[1024];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = (n > 0 && (size_t)n < sizeof path) ? fopen(path, "w") : NULL;
    if (!f)
        snprintf(err, err_cap, "cannot write %s/%s: %s", dir, name, strerror(errno));
    return f;
}

static int close_checked(FILE *f, int rc)
{
    if (f && (ferror(f) | fclose(f)))
        rc = FEED_EIO;
    return rc;
}

static double stream_idle_pct(const run_result *r)
{
    double idle = 100.0 * (1.0 - r->gpu_busy);
    return idle > 0 ? idle : 0.0;
}

static const char summary_header[] =
    "source,device,model,status,batch,warmup_batches,batches,images,total_images,wall_s,"
    "images_per_s,step_ms_mean,gpu_busy,stream_idle_pct,nvml_util_mean,nvml_util_min,"
    "pcie_rx_mbps_mean,sm_active_pct,tensor_active_pct,dram_bw_util_pct,gpu_mem_used_max_mib,"
    "wait_mean_ms,wait_p50_ms,wait_p99_ms,wait_max_ms,loader_cpu_s,loader_cores,server_cpu_s,"
    "server_cores,loss_first,loss_last,bad_samples,bad_labels\n";

static void write_summary_csv(FILE *f, const bench_meta *m, const run_result *r)
{
    fprintf(f, "%s,%s,%s,%s,%u,%llu,%llu,%llu,%llu,", r->source, m->device_kind, m->model,
            r->status ? feed_err_name(r->status) : "ok", m->batch,
            (unsigned long long)r->warmup_batches, (unsigned long long)r->batches,
            (unsigned long long)r->images, (unsigned long long)r->total_images);
    fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,", r->wall_s, r->images_per_s, r->step_ms_mean,
            r->gpu_busy, stream_idle_pct(r));
    csv_num(f, r->nvml_ok, r->nvml_util_mean);
    fputc(',', f);
    csv_num(f, r->nvml_ok, r->nvml_util_min);
    fputc(',', f);
    csv_num(f, r->nvml_ok && r->pcie_rx_mbps_mean >= 0, r->pcie_rx_mbps_mean);
    fputc(',', f);
    csv_num(f, r->gpm_ok, r->sm_active_mean);
    fputc(',', f);
    csv_num(f, r->gpm_ok, r->tensor_active_mean);
    fputc(',', f);
    csv_num(f, r->gpm_ok, r->dram_bw_mean);
    fputc(',', f);
    csv_num(f, r->gpu_mem_used_max_mib >= 0, r->gpu_mem_used_max_mib);
    fprintf(f, ",%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,", r->wait_mean_ms, r->wait_p50_ms, r->wait_p99_ms,
            r->wait_max_ms, r->loader_cpu_s, r->loader_cores);
    csv_num(f, r->server_cpu_known, r->server_cpu_s);
    fputc(',', f);
    csv_num(f, r->server_cpu_known, r->server_cores);
    fprintf(f, ",%.6g,%.6g,%llu,%llu\n", r->loss_first, r->loss_last,
            (unsigned long long)r->bad_samples, (unsigned long long)r->bad_labels);
}

static void write_meta_json(FILE *f, const bench_meta *m)
{
    fputs("  \"meta\": {\n    \"command\": ", f);
    json_str(f, m->command_line);
    fputs(",\n    \"started_utc\": ", f);
    json_str(f, m->started_utc);
    fputs(",\n    \"host\": ", f);
    json_str(f, m->host);
    fprintf(f, ",\n    \"host_cpus\": %ld,\n    \"affinity_cpus\": %d,\n    \"device\": ",
            m->host_cpus, m->affinity_cpus);
    json_str(f, m->device_kind);
    fprintf(f, ",\n    \"rank\": %u,\n    \"world\": %u", m->rank, m->world ? m->world : 1);
    fputs(",\n    \"device_name\": ", f);
    json_str(f, m->step.device_name);
    fputs(",\n    \"model\": ", f);
    json_str(f, m->model);
    fputs(",\n    \"model_source\": ", f);
    json_str(f, m->model_source);
    fprintf(f,
            ",\n    \"target_us_per_image\": %.6g,\n    \"step_base_ms\": %.6g,\n"
            "    \"ballast_gemm_ms\": %.6g,\n    \"ballast_gemms_per_step\": %u,\n"
            "    \"step_calibrated_ms\": %.6g,\n    \"batch\": %u,\n    \"image\": [%u, %u],\n"
            "    \"hidden\": %u,\n    \"data\": ",
            m->target_us_per_image, m->step.base_ms, m->step.ballast_gemm_ms, m->step.ballast_gemms,
            m->step.calibrated_ms, m->batch, m->img_h, m->img_w, m->hidden);
    json_str(f, m->data_path);
    fputs(",\n    \"dataset_name\": ", f);
    json_str(f, m->dataset_name);
    fputs(",\n    \"data_format\": ", f);
    json_str(f, m->data_format);
    fprintf(f,
            ",\n    \"data_samples\": %llu,\n    \"data_classes\": %u,\n    \"seed\": %llu,\n"
            "    \"warmup_batches\": %u,\n    \"steps\": %u,\n    \"seconds\": %.6g,\n"
            "    \"local_threads\": %u,\n    \"servers\": ",
            (unsigned long long)m->data_count, m->data_classes, (unsigned long long)m->seed,
            m->warmup, m->steps, m->seconds, m->local_threads);
    json_str(f, m->servers);
    fprintf(f,
            ",\n    \"spawned_servers\": %u,\n    \"server_threads\": %u,\n"
            "    \"server_cpus\": ",
            m->spawned, m->server_threads);
    if (m->server_cpus)
        json_str(f, m->server_cpus);
    else
        fputs("null", f);
    fprintf(f,
            ",\n    \"client_window\": %u,\n    \"client_prefetch\": %u,\n"
            "    \"client_ordered\": %s,\n    \"decode_lane\": ",
            m->window, m->prefetch, m->ordered ? "true" : "false");
    json_str(f, m->decode_lane ? m->decode_lane : "off");
    fprintf(f, ",\n    \"decode_share\": %.4f,\n    \"decode_share_max\": %.4f", m->decode_share,
            m->decode_share_max);
    fprintf(f, ",\n    \"nvml\": %s,\n    \"nvml_absent_reason\": ", m->nvml_ok ? "true" : "false");
    if (m->nvml_ok)
        fputs("null", f);
    else
        json_str(f, m->nvml_why);
    fprintf(f, ",\n    \"gpm\": %s,\n    \"gpm_absent_reason\": ", m->gpm_ok ? "true" : "false");
    if (m->gpm_ok)
        fputs("null", f);
    else
        json_str(f, m->gpm_why);
    fputs("\n  },\n", f);
}

static void write_run_json(FILE *f, const bench_meta *m, const run_result *r, bool last)
{
    fputs("    {\"source\": ", f);
    json_str(f, r->source);
    fputs(", \"status\": ", f);
    json_str(f, r->status ? feed_err_name(r->status) : "ok");
    fputs(", \"error\": ", f);
    json_str(f, r->error);
    fprintf(f,
            ",\n     \"batch\": %u, \"warmup_batches\": %llu, \"batches\": %llu, \"images\": %llu,"
            " \"total_images\": %llu,\n     \"wall_s\": %.6g, \"images_per_s\": %.6g,"
            " \"step_ms_mean\": %.6g, \"gpu_busy\": %.6g,\n     \"nvml_util_mean\": ",
            m->batch, (unsigned long long)r->warmup_batches, (unsigned long long)r->batches,
            (unsigned long long)r->images, (unsigned long long)r->total_images, r->wall_s,
            r->images_per_s, r->step_ms_mean, r->gpu_busy);
    json_num(f, r->nvml_ok, r->nvml_util_mean);
    fputs(", \"nvml_util_min\": ", f);
    json_num(f, r->nvml_ok, r->nvml_util_min);
    fputs(", \"pcie_rx_mbps_mean\": ", f);
    json_num(f, r->nvml_ok && r->pcie_rx_mbps_mean >= 0, r->pcie_rx_mbps_mean);
    fprintf(f, ",\n     \"stream_idle_pct\": %.6g, \"sm_active_pct\": ", stream_idle_pct(r));
    json_num(f, r->gpm_ok, r->sm_active_mean);
    fputs(", \"tensor_active_pct\": ", f);
    json_num(f, r->gpm_ok, r->tensor_active_mean);
    fputs(", \"dram_bw_util_pct\": ", f);
    json_num(f, r->gpm_ok, r->dram_bw_mean);
    fputs(", \"gpu_mem_used_max_mib\": ", f);
    json_num(f, r->gpu_mem_used_max_mib >= 0, r->gpu_mem_used_max_mib);
    fprintf(f,
            ",\n     \"wait_mean_ms\": %.6g, \"wait_p50_ms\": %.6g, \"wait_p99_ms\": %.6g,"
            " \"wait_max_ms\": %.6g,\n     \"loader_cpu_s\": %.6g, \"loader_cores\": %.6g,"
            " \"server_cpu_s\": ",
            r->wait_mean_ms, r->wait_p50_ms, r->wait_p99_ms, r->wait_max_ms, r->loader_cpu_s,
            r->loader_cores);
    json_num(f, r->server_cpu_known, r->server_cpu_s);
    fputs(", \"server_cores\": ", f);
    json_num(f, r->server_cpu_known, r->server_cores);
    fputs(",\n     \"server_caches\": [", f);
    for (uint32_t i = 0; i < r->ncache; i++) {
        const server_cache *c = &r->cache[i];
        fprintf(f,
                "%s{\"target\": \"%s\", \"hits\": %.0f, \"misses\": %.0f, \"not_owned\": %.0f, "
                "\"entries\": %.0f, \"bytes\": %.0f}",
                i ? ", " : "", c->target, c->hits, c->misses, c->not_owned, c->entries, c->bytes);
    }
    fputc(']', f);
    fprintf(f,
            ",\n     \"loss_first\": %.6g, \"loss_last\": %.6g, \"bad_samples\": %llu,"
            " \"bad_labels\": %llu, \"records_dropped\": %llu}%s\n",
            r->loss_first, r->loss_last, (unsigned long long)r->bad_samples,
            (unsigned long long)r->bad_labels, (unsigned long long)r->records_dropped,
            last ? "" : ",");
}

int report_write(const char *dir, const bench_meta *m, const run_result *runs, size_t nruns,
                 char *err, size_t err_cap)
{
    int rc = 0;
    FILE *f = NULL;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_cap, "cannot create %s: %s", dir, strerror(errno));
        return FEED_EIO;
    }

    f = open_in(dir, "summary.csv", err, err_cap);
    if (!f)
        return FEED_EIO;
    fputs(summary_header, f);
    for (size_t i = 0; i < nruns; i++)
        write_summary_csv(f, m, &runs[i]);
    rc = close_checked(f, rc);

    f = open_in(dir, "summary.json", err, err_cap);
    if (!f)
        return FEED_EIO;
    fputs("{\n", f);
    write_meta_json(f, m);
    fputs("  \"runs\": [\n", f);
    for (size_t i = 0; i < nruns; i++)
        write_run_json(f, m, &runs[i], i + 1 == nruns);
    fputs("  ]\n}\n", f);
    rc = close_checked(f, rc);

    f = open_in(dir, "batches.csv", err, err_cap);
    if (!f)
        return FEED_EIO;
    fputs("source,batch,warmup,t_s,wait_ms,step_ms,loss,n,bad_samples\n", f);
    for (size_t i = 0; i < nruns; i++)
        for (size_t j = 0; j < runs[i].nrecords; j++) {
            const batch_record *b = &runs[i].records[j];
            fprintf(f, "%s,%zu,%d,%.6f,%.6g,%.6g,%.6g,%u,%u\n", runs[i].source, j,
                    j < runs[i].warmup_batches, b->t_s, b->wait_ms, b->step_ms, b->loss, b->n,
                    b->bad_samples);
        }
    rc = close_checked(f, rc);

    f = open_in(dir, "nvml.csv", err, err_cap);
    if (!f)
        return FEED_EIO;
    fputs("source,t_s,gpu_util,mem_util,pcie_rx_mbps,mem_used_mib,sm_active_pct,"
          "tensor_active_pct,dram_bw_util_pct\n",
          f);
    for (size_t i = 0; i < nruns; i++)
        for (size_t j = 0; j < runs[i].nnvml; j++) {
            const nvml_sample *s = &runs[i].nvml[j];
            fprintf(f, "%s,%.3f,%d,%d,", runs[i].source, s->t_s, s->gpu_util, s->mem_util);
            csv_num(f, s->pcie_rx_mbps >= 0, s->pcie_rx_mbps);
            fputc(',', f);
            csv_num(f, s->mem_used_mib >= 0, s->mem_used_mib);
            fputc(',', f);
            csv_num(f, s->sm_active_pct >= 0, s->sm_active_pct);
            fputc(',', f);
            csv_num(f, s->tensor_active_pct >= 0, s->tensor_active_pct);
            fputc(',', f);
            csv_num(f, s->dram_bw_pct >= 0, s->dram_bw_pct);
            fputc('\n', f);
        }
    rc = close_checked(f, rc);
    if (rc)
        snprintf(err, err_cap, "write error in %s", dir);
    return rc;
}

/* Spawned feedd run on this machine: when remote comes out slower than sync, say why (the
 * servers, the client and the step share this machine's cores; on 2 cores the servers' decode
 * takes cores the step needs) and what measures the design instead. */
static void shared_cores_note(FILE *f, const bench_meta *m, const run_result *runs, size_t nruns,
                              double sync_ips)
{
    for (size_t i = 0; i < nruns && m->spawned && sync_ips > 0; i++) {
        const run_result *r = &runs[i];
        if (r->status || strcmp(r->source, "remote") != 0 || r->images_per_s >= sync_ips)
            continue;
        fprintf(f,
                "\n(remote at %.2fx of sync: its %u feedd ran on this machine%s%s, sharing its "
                "%d CPUs with the client and the step, so decoding there takes cores the step "
                "needs, and the gRPC hop is pure cost. feedd is meant for other CPU hosts: run "
                "it there and pass --servers HOST:PORT,...; on one machine with cores to spare, "
                "pin them apart with --server-cpus. README: How many server cores per GPU?)\n",
                r->images_per_s / sync_ips, m->spawned, m->server_cpus ? " on cpus " : "",
                m->server_cpus ? m->server_cpus : "", m->affinity_cpus);
        break;
    }
}

void report_table(FILE *f, const bench_meta *m, const run_result *runs, size_t nruns)
{
    double sync_ips = 0.0;
    for (size_t i = 0; i < nruns; i++)
        if (strcmp(runs[i].source, "sync") == 0 && runs[i].status == 0)
            sync_ips = runs[i].images_per_s;

    fprintf(f, "\nfeed-bench: %s step on %s, model %s", m->device_kind, m->step.device_name,
            m->model);
    if (m->step.on_gpu)
        fprintf(f, " (%.1f ms/step measured at start = %.1f us/image x %u)", m->step.calibrated_ms,
                m->step.calibrated_ms * 1000.0 / m->batch, m->batch);
    fprintf(f, "\n  data %s (%llu images, %u classes), batch %u, %ux%u, seed %llu\n", m->data_path,
            (unsigned long long)m->data_count, m->data_classes, m->batch, m->img_w, m->img_h,
            (unsigned long long)m->seed);
    fprintf(f, "  this process: %d CPUs; local threads %u; servers %s", m->affinity_cpus,
            m->local_threads, m->servers && m->servers[0] ? m->servers : "-");
    if (m->spawned)
        fprintf(f, " (spawned %u x %u threads%s%s)", m->spawned, m->server_threads,
                m->server_cpus ? ", cpus " : "", m->server_cpus ? m->server_cpus : "");
    fprintf(f, "\n  client: dataset %s, window %u, prefetch %u, %s", m->dataset_name, m->window,
            m->prefetch, m->ordered ? "ordered" : "unordered");
    if (m->decode_lane && strcmp(m->decode_lane, "off") != 0)
        fprintf(f, ", decode lane %s share %.2f%s", m->decode_lane, m->decode_share,
                m->decode_share_max > 0 ? " (adapting)" : "");
    fprintf(f, "\n  NVML: %s; GPM: %s\n\n", m->nvml_ok ? "sampled every 100 ms" : m->nvml_why,
            m->gpm_ok ? "SM activity and DRAM bandwidth every 1 s" : m->gpm_why);

    bool sim = strcmp(m->device_kind, "sim") == 0;
    const char *busy = m->step.on_gpu ? "gpu busy" : (sim ? "sim busy" : "cpu step");
    fprintf(f, "%-7s %9s %7s %8s %6s %6s %6s %7s %9s %9s %9s %9s %7s %7s %15s\n", "source",
            "images/s", "x sync", busy, "nvml", "SM", "DRAM", "GPU mem", "pcie MB/s", "wait p50",
            "wait p99", "wait max", "loader", "server", "loss start->end");
    fprintf(f, "%-7s %9s %7s %8s %6s %6s %6s %7s %9s %9s %9s %9s %7s %7s %15s\n", "", "", "",
            m->step.on_gpu ? "(events)" : (sim ? "(clock)" : "share"), "util%", "act%", "bw%",
            "GiB", "rx", "ms", "ms", "ms", "cores", "cores", "");
    for (size_t i = 0; i < nruns; i++) {
        const run_result *r = &runs[i];
        if (r->status) {
            fprintf(f, "%-7s FAILED: %s (%s)\n", r->source, r->error, feed_err_name(r->status));
            continue;
        }
        char ratio[16] = "-", util[16] = "n/a", rx[16] = "n/a", server[16] = "-";
        char sm[16] = "n/a", dram[16] = "n/a", mem[16] = "n/a";
        if (r->gpm_ok) {
            snprintf(sm, sizeof sm, "%.1f", r->sm_active_mean);
            snprintf(dram, sizeof dram, "%.1f", r->dram_bw_mean);
        }
        if (r->gpu_mem_used_max_mib >= 0)
            snprintf(mem, sizeof mem, "%.1f", r->gpu_mem_used_max_mib / 1024.0);
        if (sync_ips > 0)
            snprintf(ratio, sizeof ratio, "%.2f", r->images_per_s / sync_ips);
        if (r->nvml_ok)
            snprintf(util, sizeof util, "%.1f", r->nvml_util_mean);
        if (r->nvml_ok && r->pcie_rx_mbps_mean >= 0)
            snprintf(rx, sizeof rx, "%.0f", r->pcie_rx_mbps_mean);
        if (r->server_cpu_known)
            snprintf(server, sizeof server, "%.2f", r->server_cores);
        fprintf(f,
                "%-7s %9.1f %7s %7.1f%% %6s %6s %6s %7s %9s %9.3f %9.3f %9.3f %7.2f %7s "
                "%7.3f->%-7.3f\n",
                r->source, r->images_per_s, ratio, 100.0 * r->gpu_busy, util, sm, dram, mem, rx,
                r->wait_p50_ms, r->wait_p99_ms, r->wait_max_ms, r->loader_cores, server,
                r->loss_first, r->loss_last);
    }
    for (size_t i = 0; i < nruns; i++) {
        for (uint32_t k = 0; k < runs[i].ncache; k++) {
            const server_cache *c = &runs[i].cache[k];
            double lookups = c->hits + c->misses;
            fprintf(f,
                    "%s  server %s cache: hit rate %.1f%% (%.0f of %.0f lookups), %.0f images, "
                    "%.1f MiB, %.0f misses for samples it does not own\n",
                    k ? "" : "\nremote, decoded caches over the measured window:\n", c->target,
                    lookups > 0 ? 100.0 * c->hits / lookups : 0.0, c->hits, lookups, c->entries,
                    c->bytes / 1048576.0, c->not_owned);
        }
    }
    if (sim)
        fprintf(f,
                "\n(simulated step, rank %u of %u: no GPU; 'sim busy' is the share of wall "
                "time the simulated device was computing.)\n",
                m->rank, m->world ? m->world : 1);
    else if (!m->step.on_gpu)
        fprintf(f, "\n(CPU step: no GPU was used; 'cpu step share' is the step's share of wall "
                   "time, and loading competes with it for the same cores.)\n");
    shared_cores_note(f, m, runs, nruns, sync_ips);
}

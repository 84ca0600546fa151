// Validate custom resources with the third-party models installed by scripts/k8s-schemas.sh.
// stdin: a JSON array of objects; stdout: a JSON array of {kind, name, ok, error}.
// argv[2]: the schemas directory (its node_modules holds the pinned packages).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const MODELS = {
  "monitoring.coreos.com/v1/PodMonitor":
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor.js",
  "monitoring.coreos.com/v1/ServiceMonitor":
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.js",
};
const root = join(process.argv[2], "node_modules");
const docs = JSON.parse(readFileSync(0, "utf8"));
const out = [];
for (const doc of docs) {
  const key = `${doc.apiVersion}/${doc.kind}`;
  const where = MODELS[key];
  if (!where) {
    out.push({ kind: key, name: doc.metadata?.name, ok: false, error: "no schema installed" });
    continue;
  }
  const mod = await import(pathToFileURL(join(root, where)).href);
  try {
    new mod[doc.kind](doc).validate();
    out.push({ kind: key, name: doc.metadata?.name, ok: true, error: null });
  } catch (e) {
    out.push({ kind: key, name: doc.metadata?.name, ok: false, error: String(e.message || e) });
  }
}
process.stdout.write(JSON.stringify(out) + "\n");

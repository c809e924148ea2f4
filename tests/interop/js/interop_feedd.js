#!/usr/bin/env node
// Interop test: a real feedd against @grpc/grpc-js + @grpc/proto-loader (pure
// JavaScript, no code shared with the project). The dataset comes from
// feed-gen-dataset; labels are derived here from the directory listing and
// the CRC32C is computed here.
//
// usage: node interop_feedd.js FEEDD GEN_DATASET PROTO_DIR
// Exits 0 on success, 1 with a message on failure (including a missing
// node_modules: run `npm ci` in tests/interop/js).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, execFileSync } = require('child_process');

let grpc, protoLoader;
try {
  grpc = require('@grpc/grpc-js');
  protoLoader = require('@grpc/proto-loader');
} catch (e) {
  console.error('interop js: FAILED: @grpc/grpc-js or @grpc/proto-loader missing; run ' +
                '`npm ci` in tests/interop/js (' + e.message + ')');
  process.exit(1);
}

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[i] = c >>> 0;
  }
  return t;
})();

function crc32c(buf) {
  let c = 0xffffffff;
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// ImageFolder labels by the documented rule: byte-order sort, dot-names
// skipped, .jpg/.jpeg in any case.
function expectedLabels(root) {
  const byBytes = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b));
  const classes = fs.readdirSync(root).filter(
      (n) => !n.startsWith('.') && fs.statSync(path.join(root, n)).isDirectory()).sort(byBytes);
  const labels = [];
  classes.forEach((c, label) => {
    for (const f of fs.readdirSync(path.join(root, c)).sort(byBytes)) {
      const low = f.toLowerCase();
      if (!f.startsWith('.') && (low.endsWith('.jpg') || low.endsWith('.jpeg'))) labels.push(label);
    }
  });
  return { classes, labels };
}

function check(cond, what) {
  if (!cond) throw new Error(what);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const [feedd, gen, protoDir] = process.argv.slice(2);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'feedd-interop-js.'));
  let proc = null;
  try {
    const ds = path.join(tmp, 'ds');
    execFileSync(gen, [ds, '--classes', '3', '--per-class', '5', '--seed', '9']);
    const { classes, labels } = expectedLabels(ds);
    const portFile = path.join(tmp, 'port');
    // The dataset is served from the decoded-sample cache: Describe says so, and the
    // batches below (56 px, under the cached 64) are made from it.
    proc = spawn(feedd, ['--listen', '127.0.0.1:0', '--port-file', portFile, '--dataset',
                         'd=' + ds + ',cache=64', '--cache-bytes', '16M', '--threads', '2',
                         '--log-level', 'warn'],
                 { stdio: ['ignore', 'inherit', 'inherit'] });
    let exited = null;
    proc.on('exit', (code) => { exited = code; });
    for (let i = 0; i < 6000 && !fs.existsSync(portFile) && exited === null; i++) await sleep(10);
    check(fs.existsSync(portFile), 'feedd did not write its port file');
    const port = parseInt(fs.readFileSync(portFile, 'utf8'), 10);

    const opts = { keepCase: true, longs: Number, enums: String, defaults: true };
    const feedPkg = grpc.loadPackageDefinition(
        protoLoader.loadSync(path.join(protoDir, 'feed.proto'), opts)).feed.v1;
    const healthPkg = grpc.loadPackageDefinition(
        protoLoader.loadSync(path.join(protoDir, 'health.proto'), opts)).grpc.health.v1;
    const target = '127.0.0.1:' + port;
    const chOpts = { 'grpc.max_receive_message_length': -1 };
    const feed = new feedPkg.Feed(target, grpc.credentials.createInsecure(), chOpts);
    const health = new healthPkg.Health(target, grpc.credentials.createInsecure(), chOpts);
    const deadline = () => new Date(Date.now() + 60000);

    const info = await new Promise((res, rej) =>
      feed.Describe({}, { deadline: deadline() }, (e, r) => (e ? rej(e) : res(r))));
    check(info.protocol_version === 1, 'protocol_version');
    check(info.datasets.length === 1 && info.datasets[0].name === 'd', 'datasets');
    check(info.datasets[0].num_samples === labels.length, 'num_samples');
    check(JSON.stringify(info.datasets[0].class_names) === JSON.stringify(classes), 'class_names');
    check(info.datasets[0].cache_side === 64, 'cache_side');
    const notFound = await new Promise((res) =>
      feed.Describe({ dataset: 'nope' }, { deadline: deadline() }, (e) => res(e)));
    check(notFound && notFound.code === grpc.status.NOT_FOUND, 'Describe(nope) -> NOT_FOUND');

    const h = await new Promise((res, rej) =>
      health.Check({ service: '' }, { deadline: deadline() }, (e, r) => (e ? rej(e) : res(r))));
    check(h.status === 'SERVING', 'health SERVING, got ' + h.status);

    const n = labels.length, side = 40, per = 5, nbatch = 6, window = 3;
    const plan = [];
    for (let b = 0; b < nbatch; b++) {
      plan.push([]);
      for (let i = 0; i < per; i++) plan[b].push((b * per + i * 4) % n);
    }
    const seen = new Set();
    await new Promise((resolve, reject) => {
      const call = feed.Stream({ deadline: deadline() });
      let sent = 0;
      const sendNext = () => {
        const req = { batch_id: sent, epoch: 2, indices: plan[sent] };
        if (sent === 0) {
          req.open = { dataset: 'd', seed: 5, window, protocol_version: 1,
                       client_name: 'interop-js',
                       transform: { mode: 'TRANSFORM_MODE_TRAIN', out_height: side,
                                    out_width: side, flip_prob: 0.5 } };
        }
        call.write(req);
        sent++;
      };
      call.on('data', (batch) => {
        try {
          const b = batch.batch_id;
          check(b >= 0 && b < nbatch && !seen.has(b), 'batch_id ' + b);
          seen.add(b);
          check(JSON.stringify(batch.indices) === JSON.stringify(plan[b]), 'indices echoed');
          check(JSON.stringify(batch.labels) === JSON.stringify(plan[b].map((i) => labels[i])),
                'labels');
          check(batch.status.every((s) => s === 'SAMPLE_OK'), 'status');
          check(batch.height === side && batch.width === side && batch.channels === 3, 'shape');
          check(batch.data.length === per * side * side * 3, 'data length');
          check(crc32c(batch.data) === batch.crc32c, 'crc32c');
          if (sent < nbatch) sendNext();
          else if (seen.size === nbatch) call.end();
        } catch (e) {
          call.cancel();
          reject(e);
        }
      });
      call.on('error', reject);
      call.on('end', resolve);
      for (let k = 0; k < window; k++) sendNext();
    });
    check(seen.size === nbatch, 'all batches arrived (' + seen.size + ' of ' + nbatch + ')');
    feed.close();
    health.close();

    const code = await new Promise((res) => {
      if (exited !== null) return res(exited);
      proc.on('exit', (c) => res(c));
      proc.kill('SIGTERM');
    });
    proc = null;
    check(code === 0, 'feedd exit status after SIGTERM: ' + code);
    console.log('interop js: Describe, Health and ' + nbatch + ' batches OK');
    return 0;
  } catch (e) {
    console.error('interop js: FAILED: ' + (e && e.stack ? e.stack : e));
    return 1;
  } finally {
    if (proc) proc.kill('SIGKILL');
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().then((rc) => process.exit(rc));

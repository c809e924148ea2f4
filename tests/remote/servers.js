'use strict';
/*
 * Real servers for the remote-blob tests and benchmark, all on 127.0.0.1
 * port 0, started by the test that runs this script:
 *  - an S3-compatible server (@20minutes/s3rver: it recomputes and checks
 *    every SigV4 signature with the key pair given in FEED_TEST_S3_KEY /
 *    FEED_TEST_S3_SECRET, so a wrong secret gets 403 SignatureDoesNotMatch),
 *    with one bucket holding every file of --data;
 *  - a static HTTP server with Range support (http-server) over a copy of
 *    --data;
 *  - a fault proxy in front of each, which forwards requests unchanged and,
 *    on command, answers with a status, cuts a response half-way, appends
 *    bytes to a body, delays, stalls, or refuses one object; redirects to
 *    another port or to itself; answers 500 with a body that never ends;
 *    drops a 206's Content-Range; serves a ranged GET from one byte
 *    before the range asked for (with an honest Content-Range); or
 *    drip-feeds one object's GET bodies at a byte a second (a slow store);
 *  - with --latency-ms N, a TCP proxy in front of the S3 server that delays
 *    every chunk N/2 ms each way (N ms per round trip), for the benchmark; it
 *    runs in a child process of its own, so it does not queue behind the S3
 *    server's work on one event loop.
 *
 * Prints one line "ready s3=P s3proxy=P http=P httpproxy=P latency=P" when
 * everything listens; then reads commands on stdin, one a line, and answers
 * each with one line ("ok ..." or "error ..."); exits when stdin closes.
 *
 * usage: node servers.js --data DIR --bucket NAME [--latency-ms N]
 */
const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');
const readline = require('readline');
const S3rver = require('@20minutes/s3rver');
const { fork } = require('child_process');
const AWSAccount = require('@20minutes/s3rver/lib/models/account');
const httpServer = require('http-server');

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

const dataDir = arg('--data');
const bucket = arg('--bucket', 'feed-test');
const latencyMs = Number(arg('--latency-ms', '0'));
if (!dataDir && !process.argv.includes('--latency-child')) {
  console.error('usage: node servers.js --data DIR --bucket NAME [--latency-ms N]');
  process.exit(2);
}

function listFiles(dir, prefix = '') {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...listFiles(path.join(dir, e.name), rel));
    else if (e.isFile()) out.push(rel);
  }
  return out.sort();
}

function listen(server) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });
}

function request(port, method, key, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method, path: `/${bucket}/${encodeURI(key)}`,
        headers: body ? { 'content-length': body.length } : {} },
      (res) => {
        res.resume();
        res.on('end', () => (res.statusCode < 300 ? resolve() : reject(
          new Error(`${method} ${key}: HTTP ${res.statusCode}`))));
      });
    req.on('error', reject);
    req.end(body);
  });
}

/* What the fault proxies do next; shared by both. */
const fault = { status: 0, statusLeft: 0, cutLeft: 0, overlongLeft: 0, stallLeft: 0,
                delayMs: 0, denied: new Set(), dripped: new Set(), requests: 0, connections: 0,
                redirectPort: 0, redirectLeft: 0, endlessLeft: 0, endlessBytes: 0,
                noRangeLeft: 0, shiftLeft: 0, perKey: new Map() };
const stalled = new Set();
const dripping = new Set(); /* responses being drip-fed */

/* Sends body a byte a second after the headers; ends when done or when the client leaves. */
function drip(res, status, headers, body) {
  res.writeHead(status, headers);
  let at = 0;
  dripping.add(res);
  const timer = setInterval(() => {
    if (at < body.length) res.write(body.subarray(at, ++at));
    if (at >= body.length) {
      clearInterval(timer);
      dripping.delete(res);
      res.end();
    }
  }, 1000);
  res.on('close', () => {
    clearInterval(timer);
    dripping.delete(res);
  });
}

function takeOne(field) {
  if (fault[field] > 0) {
    fault[field]--;
    return true;
  }
  return false;
}

function makeFaultProxy(upstreamPort) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const server = http.createServer((req, res) => {
    fault.requests++;
    const key = decodeURIComponent(req.url.split('?')[0]);
    const base = key.slice(key.lastIndexOf('/') + 1);
    fault.perKey.set(base, (fault.perKey.get(base) || 0) + 1);
    const dripped = req.method === 'GET' && fault.dripped.has(base);
    if ([...fault.denied].some((d) => key.endsWith('/' + d))) {
      res.writeHead(403, { 'content-type': 'application/xml' });
      res.end('<?xml version="1.0"?><Error><Code>AccessDenied</Code></Error>');
      return;
    }
    if (takeOne('statusLeft')) {
      res.writeHead(fault.status, { 'content-type': 'text/plain' });
      res.end(`injected ${fault.status}\n`);
      return;
    }
    if (takeOne('stallLeft')) {
      stalled.add(res);
      return;
    }
    if (takeOne('redirectLeft')) {
      const port = fault.redirectPort || server.address().port; /* 0: this proxy itself */
      res.writeHead(302, { location: `http://127.0.0.1:${port}${req.url}`, 'content-length': '0' });
      res.end();
      return;
    }
    if (takeOne('endlessLeft')) {
      /* A 500 whose body never ends: written while the client reads, until it hangs up. */
      res.writeHead(500, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(64 * 1024, 0x41);
      const pump = () => {
        while (!res.destroyed && res.write(chunk)) fault.endlessBytes += chunk.length;
        if (!res.destroyed) res.once('drain', pump);
      };
      res.on('close', () => res.removeAllListeners('drain'));
      pump();
      return;
    }
    const noRange = takeOne('noRangeLeft');
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range || '');
    if (m && Number(m[1]) > 0 && takeOne('shiftLeft')) {
      req.headers.range = `bytes=${Number(m[1]) - 1}-${Number(m[2]) - 1}`;
    }
    const cut = takeOne('cutLeft');
    const overlong = takeOne('overlongLeft');
    const forward = () => {
      const up = http.request({ host: '127.0.0.1', port: upstreamPort, method: req.method,
                                path: req.url, headers: req.headers, agent }, (ures) => {
        const chunks = [];
        ures.on('data', (c) => chunks.push(c));
        ures.on('end', () => {
          let body = Buffer.concat(chunks);
          const headers = { ...ures.headers };
          if (overlong) body = Buffer.concat([body, Buffer.alloc(16, 0x55)]);
          if (noRange) delete headers['content-range'];
          if (req.method !== 'HEAD') headers['content-length'] = String(body.length);
          if (dripped) {
            drip(res, ures.statusCode, headers, body);
            return;
          }
          res.writeHead(ures.statusCode, headers);
          if (cut && body.length > 1) {
            res.write(body.subarray(0, body.length >> 1), () => res.socket.destroy());
          } else {
            res.end(body);
          }
        });
      });
      up.on('error', () => res.socket && res.socket.destroy());
      req.pipe(up);
    };
    if (fault.delayMs > 0) setTimeout(forward, fault.delayMs);
    else forward();
  });
  server.on('connection', () => fault.connections++);
  server.keepAliveTimeout = 30000;
  return server;
}

/* A TCP proxy that holds every chunk half the round trip in each direction. */
function makeLatencyProxy(upstreamPort, rttMs) {
  const half = rttMs / 2;
  const pipeDelayed = (from, to) => {
    from.on('data', (c) => setTimeout(() => to.destroyed || to.write(c), half));
    from.on('end', () => setTimeout(() => to.end(), half));
    from.on('error', () => to.destroy());
  };
  return net.createServer((client) => {
    client.setNoDelay(true);
    const up = net.connect(upstreamPort, '127.0.0.1');
    up.setNoDelay(true);
    pipeDelayed(client, up);
    pipeDelayed(up, client);
  });
}

/* --latency-child PORT MS: only the latency proxy, in its own process (own core). */
async function latencyChild() {
  const i = process.argv.indexOf('--latency-child');
  const port = await listen(makeLatencyProxy(Number(process.argv[i + 1]), Number(process.argv[i + 2])));
  process.send(port);
  process.on('disconnect', () => process.exit(0));
}

function startLatencyChild(upstreamPort, rttMs) {
  return new Promise((resolve, reject) => {
    const child = fork(__filename, ['--latency-child', String(upstreamPort), String(rttMs)]);
    child.once('message', (port) => resolve({ child, port }));
    child.once('error', reject);
  });
}

async function main() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'feed-remote-servers-'));
  const httpRoot = path.join(tmp, 'http');
  fs.cpSync(dataDir, httpRoot, { recursive: true });
  const key = process.env.FEED_TEST_S3_KEY || 'S3RVER';
  const secret = process.env.FEED_TEST_S3_SECRET || 'S3RVER';
  AWSAccount.DUMMY_ACCOUNT.createKeyPair(key, secret);
  const s3 = new S3rver({ address: '127.0.0.1', port: 0, silent: true, serviceEndpoint: 'localhost',
                          directory: path.join(tmp, 's3'), configureBuckets: [{ name: bucket }] });
  const s3addr = await s3.run();
  const s3port = s3addr.port;
  for (const f of listFiles(dataDir)) await request(s3port, 'PUT', f, fs.readFileSync(path.join(dataDir, f)));

  const hs = httpServer.createServer({ root: httpRoot, cache: -1, showDir: false, silent: true });
  const httpPort = await listen(hs.server);
  const s3proxy = await listen(makeFaultProxy(s3port));
  const httpproxy = await listen(makeFaultProxy(httpPort));
  const lat = latencyMs > 0 ? await startLatencyChild(s3port, latencyMs) : { child: null, port: 0 };
  const latency = lat.port;
  console.log(`ready s3=${s3port} s3proxy=${s3proxy} http=${httpPort} httpproxy=${httpproxy} ` +
              `latency=${latency}`);

  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', async (line) => {
    const [cmd, a, b] = line.trim().split(/\s+/);
    try {
      if (cmd === 'status') Object.assign(fault, { status: Number(a), statusLeft: Number(b) });
      else if (cmd === 'cut') fault.cutLeft = Number(a);
      else if (cmd === 'overlong') fault.overlongLeft = Number(a);
      else if (cmd === 'stall') fault.stallLeft = Number(a);
      else if (cmd === 'delay') fault.delayMs = Number(a);
      else if (cmd === 'redirect') Object.assign(fault, { redirectPort: Number(a), redirectLeft: Number(b) });
      else if (cmd === 'endless') fault.endlessLeft = Number(a);
      else if (cmd === 'norange') fault.noRangeLeft = Number(a);
      else if (cmd === 'shift') fault.shiftLeft = Number(a);
      else if (cmd === 'deny') fault.denied.add(a);
      else if (cmd === 'allow') fault.denied.delete(a);
      else if (cmd === 'drip') fault.dripped.add(a);
      else if (cmd === 'undrip') {
        /* Stops dripping a's new requests and cuts the responses being dripped. */
        fault.dripped.delete(a);
        for (const r of dripping) r.socket && r.socket.destroy();
      } else if (cmd === 'dripping') {
        /* ok requests=<responses being dripped now> */
        console.log(`ok requests=${dripping.size} connections=${fault.connections}`);
        return;
      } else if (cmd === 'hits') {
        /* ok requests=<requests so far for objects named a> */
        console.log(`ok requests=${fault.perKey.get(a) || 0} connections=${fault.connections}`);
        return;
      }
      else if (cmd === 'delete') {
        await request(s3port, 'DELETE', a);
        fs.rmSync(path.join(httpRoot, a), { force: true });
      } else if (cmd === 'replace') {
        /* The same key with other bytes of the same size: a changed object. */
        const body = Buffer.from(fs.readFileSync(path.join(dataDir, a)));
        body[0] ^= 0xff;
        await request(s3port, 'PUT', a, body);
        fs.writeFileSync(path.join(httpRoot, a), body);
      } else if (cmd !== 'stats') throw new Error(`unknown command ${cmd}`);
      console.log(`ok requests=${fault.requests} connections=${fault.connections} ` +
                  `endless_bytes=${fault.endlessBytes}`);
    } catch (e) {
      console.log(`error ${e.message}`);
    }
  });
  rl.on('close', () => {
    if (lat.child) lat.child.disconnect();
    for (const r of stalled) r.socket && r.socket.destroy();
    for (const r of dripping) r.socket && r.socket.destroy();
    fs.rmSync(tmp, { recursive: true, force: true });
    process.exit(0);
  });
}

(process.argv.includes('--latency-child') ? latencyChild() : main()).catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});

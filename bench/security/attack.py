#!/usr/bin/python3
"""Issue 22's attacks against real feedd processes on 127.0.0.1, for the README's
security figures. Usage: attack.py FEEDD DATASET CERTDIR RUNS [SECTIONS], SECTIONS
a comma list of flood, metrics, sigterm (default all). Prints one JSON object per
measurement (raw lines, kept in runs.jsonl by hostile.sh). A stop's time is measured
twice: by this process (SIGTERM sent to exit reaped: stop_s) and by feedd's own
log ('signal 15' to 'feedd stopped': feedd_stop_s), as this process's threads
compete with the attack on a loaded machine."""
import json, os, resource, select, signal, socket, ssl, struct, subprocess, sys, tempfile, threading, time
import urllib.request

FEEDD, DATA, CERTS, RUNS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
SECTIONS = sys.argv[5].split(',') if len(sys.argv) > 5 else ['flood', 'metrics', 'sigterm']
FLOOD = 256 << 20
IDLE = 2000
resource.setrlimit(resource.RLIMIT_NOFILE, (IDLE + 512, max(IDLE + 512, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))


def start(tls=False):
    d = tempfile.mkdtemp()
    args = [FEEDD, '--dataset', 'd=' + DATA, '--threads', '1', '--listen', '127.0.0.1:0',
            '--port-file', d + '/port', '--metrics-listen', '127.0.0.1:0',
            '--metrics-port-file', d + '/mport', '--log-level', 'info']
    if tls:
        tok = d + '/token'
        open(tok, 'w').write('bench-token\n')
        args += ['--tls-cert', CERTS + '/server.pem', '--tls-key', CERTS + '/server.key',
                 '--auth-token-file', tok]
    p = subprocess.Popen(args, stderr=open(d + '/log', 'w'))
    while not (os.path.exists(d + '/port') and os.path.exists(d + '/mport')):
        if p.poll() is not None:
            raise SystemExit('feedd exited: ' + open(d + '/log').read())
        time.sleep(0.02)
    time.sleep(0.05)
    p.port = int(open(d + '/port').read())
    p.mport = int(open(d + '/mport').read())
    p.dir = d
    return p


def mem(p, key):
    for line in open('/proc/%d/status' % p.pid):
        if line.startswith(key):
            return int(line.split()[1]) << 10
    return 0


def frame(t, flags, stream, payload):
    n = len(payload)
    return struct.pack('>BHBBI', n >> 16, n & 0xffff, t, flags, stream) + payload


def hpack_int(v, bits, first=0):
    limit = (1 << bits) - 1
    if v < limit:
        return bytes([first | v])
    out = [first | limit]
    v -= limit
    while v >= 128:
        out.append((v & 127) | 128)
        v >>= 7
    return bytes(out + [v])


def flood(port, tls, stop=None):
    """CONTINUATION flood on one connection: bytes sent when the server ended it (or all).
    The server's end is seen as the client of test_floods.c sees it: readable, then EOF."""
    s = socket.create_connection(('127.0.0.1', port))
    s.settimeout(60)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(['h2'])
        s = ctx.wrap_socket(s)
    chunk = frame(9, 0, 1, b'a' * 16384)
    sent = 0
    try:
        s.sendall(b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + frame(4, 0, 0, b''))
        s.sendall(frame(1, 0, 1, b'\x00' + hpack_int(1, 7) + b'x' + hpack_int(FLOOD, 7)))
        while sent < FLOOD and not (stop and stop.is_set()):
            readable, writable, _ = select.select([s], [s], [], 60)
            if readable and not s.recv(65536):
                break
            if writable:
                s.sendall(chunk)
                sent += 16384
    except (OSError, ssl.SSLError):
        pass
    s.close()
    return sent


def scrape(port, timeout=10):
    try:
        urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port, timeout=timeout).read()
        return True
    except Exception:
        return False


def log_time(line):
    """Seconds of the day from feedd's log line '2026-12-03T22:26:02.036Z ...'."""
    hms = line.split('T', 1)[1].split('Z', 1)[0]
    h, m, sec = hms.split(':')
    return int(h) * 3600 + int(m) * 60 + float(sec)


def stop(p):
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = 'hung'
    secs = time.monotonic() - t0
    lines = open(p.dir + '/log').read().splitlines()
    sig = [log_time(l) for l in lines if 'signal 15: draining' in l]
    end = [log_time(l) for l in lines if 'feedd stopped' in l or 'exiting without' in l]
    p.feedd_stop_s = end[-1] - sig[0] if sig and end else None
    return secs, rc


def emit(**kw):
    print(json.dumps(kw), flush=True)


# 1, 2: RSS a flood adds (peak over the start), and what is left after the cut.
for run in range(RUNS if 'flood' in SECTIONS else 0):
    for tls in (True, False):
        p = start(tls)
        before = mem(p, 'VmRSS:')
        sent = flood(p.port, tls)
        time.sleep(2)  # benchmark only: the guard trims for 1.7 s after a cut
        peak = mem(p, 'VmHWM:')
        after = mem(p, 'VmRSS:')
        secs, rc = stop(p)
        emit(case='flood', tls=tls, run=run, sent_mib=sent / 2**20, before_mib=before / 2**20,
             peak_added_mib=(peak - before) / 2**20, after_added_mib=(after - before) / 2**20,
             stop_s=secs, rc=rc)

# 3: scrapes during and after IDLE idle connections to the metrics port.
for run in range(RUNS if 'metrics' in SECTIONS else 0):
    p = start()
    conns = [socket.create_connection(('127.0.0.1', p.mport)) for _ in range(IDLE)]
    during = sum(scrape(p.mport) for _ in range(5))
    for c in conns:
        c.close()
    after = sum(scrape(p.mport) for _ in range(5))
    secs, rc = stop(p)
    emit(case='metrics_idle', run=run, idle=IDLE, during_ok=during, during_of=5, after_ok=after,
         after_of=5, stop_s=secs, rc=rc)

# 4: SIGTERM while each attack goes on.
for run in range(RUNS if 'sigterm' in SECTIONS else 0):
    for attack in ('tls_flood', 'plain_flood', 'metrics_idle'):
        p = start(attack == 'tls_flood')
        ev = threading.Event()
        conns = []
        if attack == 'metrics_idle':
            conns = [socket.create_connection(('127.0.0.1', p.mport)) for _ in range(IDLE)]
            th = None
        else:
            def loop(port=p.port, tls=attack == 'tls_flood'):
                while not ev.is_set():
                    try:
                        flood(port, tls, ev)
                    except OSError:
                        return
            th = threading.Thread(target=loop, daemon=True)
            th.start()
            time.sleep(0.3)
        secs, rc = stop(p)
        ev.set()
        for c in conns:
            c.close()
        emit(case='sigterm', attack=attack, run=run, stop_s=secs, feedd_stop_s=p.feedd_stop_s,
             rc=rc)

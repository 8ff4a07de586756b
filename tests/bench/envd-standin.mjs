// envd-standin.mjs — the yardstick for tests/bench/bench_e2b.py: envd's
// own design in ~40 lines, process.Process/Start only. Each Start spawns
// what it asks (the SDK's `/bin/bash -l -c CMD`) as the user with Node's
// child_process, no shell in between, and streams
// Connect envelopes (JSON codec): start, data (stdout/stderr, base64),
// end, then the end-of-stream envelope. Usage: node envd-standin.mjs PORT
// USER (a user name from /etc/passwd; requests without one run as it).
import http from 'node:http';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

const [port, user] = [Number(process.argv[2]), process.argv[3]];
const pw = readFileSync('/etc/passwd', 'utf8').split('\n').map((l) => l.split(':'))
  .find((f) => f[0] === user);
const [uid, gid, home] = [Number(pw[2]), Number(pw[3]), pw[5]];
const frame = (flags, obj) => {
  const body = Buffer.from(JSON.stringify(obj));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
};

http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    if (req.url !== '/process.Process/Start') { res.writeHead(404); res.end(); return; }
    const r = JSON.parse(Buffer.concat(chunks).subarray(5).toString()).process;
    res.writeHead(200, { 'content-type': 'application/connect+json' });
    const self = uid === process.getuid();
    const child = spawn(r.cmd, r.args || [], {
      cwd: r.cwd || '/', uid: self ? undefined : uid, gid: self ? undefined : gid,
      env: { ...process.env, HOME: home, USER: user, LOGNAME: user, ...(r.envs || {}) },
      stdio: ['ignore', 'pipe', 'pipe'] });
    res.write(frame(0, { event: { start: { pid: child.pid } } }));
    const out = (k) => (d) => res.write(frame(0, { event: { data: { [k]: d.toString('base64') } } }));
    child.stdout.on('data', out('stdout'));
    child.stderr.on('data', out('stderr'));
    child.on('close', (code, sig) => {
      const status = sig ? `signal: ${sig}` : `exit status ${code}`;
      res.write(frame(0, { event: { end: { exitCode: code ?? -1, exited: !sig, status } } }));
      res.end(frame(2, {}));
    });
  });
}).listen(port, '127.0.0.1');

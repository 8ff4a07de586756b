// drive.mjs — the published e2b SDK (tests/e2b/package.json, pinned by
// package-lock.json) driving a termd in the SDK's debug mode: one
// scenario per run (`node drive.mjs <scenario>`), its observations as one
// JSON line on stdout; tests/regress/door/envd/test_envd.py asserts on them.
// Env: E2B_SANDBOX_URL (termd), TERMD_TOKEN (sent as X-Access-Token),
// E2B_DEBUG=true.
import { Sandbox, CommandExitError, NotFoundError } from 'e2b';
import { writeFileSync } from 'node:fs';

function sandbox() {
  // Sandbox.create() in debug mode is this, without a token: the token
  // termd was started with goes in as the sandbox's envd access token.
  return new Sandbox({
    sandboxId: 'debug_sandbox_id',
    envdVersion: '99.99.99',
    envdAccessToken: process.env.TERMD_TOKEN || undefined,
    debug: true,
  });
}

const enc = new TextEncoder();
const dec = new TextDecoder();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function errorOf(p) {
  try {
    await p;
    return null;
  } catch (e) {
    return { name: e.constructor.name, message: String(e.message), exitCode: e.exitCode,
      stdout: e.stdout, stderr: e.stderr };
  }
}

const scenarios = {
  async create() {
    const s = await Sandbox.create();
    const r = await s.commands.run('echo created');
    return { sandboxId: s.sandboxId, stdout: r.stdout };
  },

  async commands() {
    const s = sandbox();
    const o = {};
    o.run = await s.commands.run('echo out; echo err >&2; printf tail');
    o.exit3 = await errorOf(s.commands.run('echo before; exit 3'));
    o.envs = await s.commands.run('echo "$FOO"', { envs: { FOO: 'bar baz' } });
    o.envsLeak = await s.commands.run('echo "[$FOO]"');
    o.cwd = await s.commands.run('pwd', { cwd: '/tmp' });
    o.home = await s.commands.run('pwd');
    o.badCwd = await errorOf(s.commands.run('pwd', { cwd: '/no/such/dir' }));
    const chunks = [];
    o.onStdout = await s.commands.run('for i in 1 2 3; do echo $i; sleep 0.1; done',
      { onStdout: (d) => chunks.push(d) });
    o.chunks = chunks;
    const bg = await s.commands.run('sleep 0.5; echo bg-done', { background: true });
    o.bgPid = bg.pid;
    o.bgWait = await bg.wait();
    const long = await s.commands.run('sleep 60', { background: true });
    o.longPid = long.pid;
    o.list = (await s.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args }));
    o.kill = await s.commands.kill(long.pid);
    o.killWait = await errorOf(long.wait());
    o.aliveAfterKill = await errorOf(s.commands.run(`kill -0 ${long.pid}`));
    o.killUnknown = await s.commands.kill(999999);
    o.listAfter = (await s.commands.list()).map((p) => p.pid);
    const cat = await s.commands.run('cat', { background: true, stdin: true });
    await s.commands.sendStdin(cat.pid, 'line one\n');
    await s.commands.sendStdin(cat.pid, 'line two\n');
    await sleep(200);
    await s.commands.closeStdin(cat.pid);
    o.cat = await cat.wait();
    o.noStdin = await s.commands.run('cat; echo "rc=$?"');
    o.sendUnknown = await errorOf(s.commands.sendStdin(999999, 'x'));
    // connect by pid: a second handle on a running process gets its output and end
    const slow = await s.commands.run('sleep 0.6; echo late; exit 4', { background: true });
    const again = await s.commands.connect(slow.pid);
    o.connectWait = await errorOf(again.wait());
    o.connectUnknown = await errorOf(s.commands.connect(999999));
    o.bytes = await s.commands.run("printf '\\xc3\\xa9\\x00z'");
    return o;
  },

  async reconnect() {
    // lines 1 and 2, then a gate the driver opens once it has disconnected
    // and given termd a second to see the stream end; lines 3 to 6 then come
    // while nobody is attached (printed into a stream termd still thought
    // open, under load, they were lost: a test's race, not a loss)
    const s = sandbox();
    const first = [];
    const gate = process.env.TERMD_GATE || '/nonexistent';
    const h = await s.commands.run('for i in 1 2; do echo line$i; sleep 0.3; done; ' +
      `while [ ! -e '${gate}' ]; do sleep 0.05; done; ` +
      'for i in 3 4 5 6; do echo line$i; sleep 0.3; done',
      { background: true, onStdout: (d) => first.push(d) });
    for (let i = 0; i < 600 && !first.join('').includes('line2'); i++) await sleep(100);
    await h.disconnect();
    const cut = first.join('');
    await sleep(1000);
    writeFileSync(gate, '');
    await sleep(1200);   // lines printed while nobody is attached
    const again = await s.commands.connect(h.pid);
    const r = await again.wait();
    return { pid: h.pid, first: cut, second: r.stdout, exitCode: r.exitCode };
  },

  async pty() {
    const s = sandbox();
    let out = '';
    const h = await s.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d); },
      envs: { PS1: '$ ' } });
    const o = { pid: h.pid };
    await s.pty.sendInput(h.pid, enc.encode('tput cols\n'));
    for (let i = 0; i < 50 && !/\r80\r\n/.test(out); i++) await sleep(100);
    o.cols80 = /\r80\r\n/.test(out);
    await s.pty.resize(h.pid, { cols: 123, rows: 30 });
    await s.pty.sendInput(h.pid, enc.encode('tput cols; tput lines\n'));
    for (let i = 0; i < 50 && !/\r123\r\n30\r\n/.test(out); i++) await sleep(100);
    o.cols123 = /\r123\r\n30\r\n/.test(out);
    o.list = (await s.commands.list()).map((p) => p.pid);
    await s.pty.sendInput(h.pid, enc.encode('exit\n'));
    o.end = await h.wait();
    const k = await s.pty.create({ cols: 80, rows: 24, onData: () => {} });
    o.killed = await s.pty.kill(k.pid);
    o.killedWait = await errorOf(k.wait());
    o.out = out;
    return o;
  },

  async files() {
    const s = sandbox();
    const base = process.env.E2B_TEST_DIR;
    const o = {};
    o.write = await s.files.write(`${base}/dir/a.txt`, 'hello files');
    o.read = await s.files.read(`${base}/dir/a.txt`);
    const all = new Uint8Array(256);
    for (let i = 0; i < 256; i++) all[i] = i;
    await s.files.write(`${base}/dir/bytes.bin`, all);
    const back = await s.files.read(`${base}/dir/bytes.bin`, { format: 'bytes' });
    o.bytesSame = back.length === 256 && back.every((v, i) => v === i);
    const big = new Uint8Array(300 * 1024);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 255;
    await s.files.write(`${base}/big.bin`, big);
    const bigBack = await s.files.read(`${base}/big.bin`, { format: 'bytes' });
    o.bigSame = bigBack.length === big.length && bigBack.every((v, i) => v === big[i]);
    await s.files.write(`${base}/empty.txt`, '');
    o.empty = await s.files.read(`${base}/empty.txt`);
    o.relative = await s.files.write('rel/r.txt', 'relative');
    o.exists = await s.files.exists(`${base}/dir/a.txt`);
    o.existsNot = await s.files.exists(`${base}/nope`);
    o.info = await s.files.getInfo(`${base}/dir/a.txt`);
    o.infoMissing = await errorOf(s.files.getInfo(`${base}/nope`));
    o.readMissing = await errorOf(s.files.read(`${base}/nope`));
    o.makeDir = await s.files.makeDir(`${base}/made/deep`);
    o.makeDirAgain = await s.files.makeDir(`${base}/made/deep`);
    await s.files.write(`${base}/made/deep/x.txt`, 'x');
    o.list1 = (await s.files.list(base)).map((e) => [e.name, e.type, e.path]);
    o.list3 = (await s.files.list(base, { depth: 3 })).map((e) => e.path);
    o.listFile = await errorOf(s.files.list(`${base}/dir/a.txt`));
    o.rename = await s.files.rename(`${base}/dir/a.txt`, `${base}/moved/b.txt`);
    o.renamedOld = await s.files.exists(`${base}/dir/a.txt`);
    o.renamedNew = await s.files.read(`${base}/moved/b.txt`);
    o.renameMissing = await errorOf(s.files.rename(`${base}/nope`, `${base}/nope2`));
    await s.files.remove(`${base}/made`);
    o.removed = await s.files.exists(`${base}/made`);
    o.removeMissing = await errorOf(s.files.remove(`${base}/nope`));
    o.multi = await s.files.write([
      { path: `${base}/m1.txt`, data: 'one' },
      { path: `${base}/m2.txt`, data: 'two' },
    ]);
    o.octet = await s.files.write(`${base}/octet.txt`, 'via octet-stream', { useOctetStream: true });
    const text = 'gzip both ways '.repeat(1000);
    await s.files.write(`${base}/gz.txt`, text, { gzip: true });
    o.gzipSame = (await s.files.read(`${base}/gz.txt`, { gzip: true })) === text;
    return o;
  },
};

scenarios.watch = async function () {
  const s = sandbox();
  const base = process.env.E2B_TEST_DIR;
  const events = [];
  const h = await s.files.watchDir(base, (e) => events.push([e.type, e.name]),
    { recursive: true });
  await s.files.write(`${base}/a.txt`, 'one');
  await s.files.write(`${base}/a.txt`, 'two');          // in place: a write
  await s.files.makeDir(`${base}/sub`);
  await sleep(300);                                       // the new folder is watched
  await s.files.write(`${base}/sub/deep.txt`, 'deep');
  await s.files.rename(`${base}/a.txt`, `${base}/b.txt`);
  await s.commands.run(`chmod 600 ${base}/b.txt`);
  await s.files.remove(`${base}/b.txt`);
  await sleep(500);
  await h.stop();
  const o = { events };
  o.missing = await errorOf(s.files.watchDir(`${base}/nope`, () => {}));
  o.onFile = await errorOf(s.files.watchDir(`${base}/sub/deep.txt`, () => {}));
  const flat = [];
  const h2 = await s.files.watchDir(base, (e) => flat.push([e.type, e.name]));
  await s.files.write(`${base}/sub/not-seen.txt`, 'x');
  await s.files.write(`${base}/top.txt`, 'x');
  await sleep(500);
  await h2.stop();
  o.flat = flat;
  return o;
};

scenarios.user = async function () {
  const s = sandbox();
  const base = process.env.E2B_TEST_DIR;
  const o = {};
  o.nobody = await s.commands.run('id -un; echo "$HOME"', { user: 'nobody', cwd: '/tmp' }).catch((e) => ({ err: e.exitCode, stdout: e.stdout, stderr: e.stderr }));
  o.root = await s.commands.run('id -un', { user: 'root' }).catch((e) => ({ err: e.exitCode, stdout: e.stdout, stderr: e.stderr }));
  o.default = await s.commands.run('id -un; pwd', { cwd: process.env.E2B_DEFAULT_CWD });
  o.write = await s.files.write(`${base}/nob.txt`, 'x', { user: 'nobody' });
  o.info = await s.files.getInfo(`${base}/nob.txt`);
  o.mk = await s.files.makeDir(`${base}/nobdir`, { user: 'nobody' });
  o.mkInfo = await s.files.getInfo(`${base}/nobdir`);
  o.unknown = await errorOf(s.commands.run('true', { user: 'no-such-user-xyz' }));
  return o;
};

// e2b's own SDK test "files/write > write multiple files", as E2B_TEST_USER,
// into E2B_TEST_DIR (a folder only root may write in, as / is)
scenarios.writeMulti = async function () {
  const s = sandbox();
  const base = process.env.E2B_TEST_DIR;
  const user = process.env.E2B_TEST_USER;
  const files = [];
  for (let i = 0; i < 10; i++)
    files.push({ path: `${base}/0/multi_test_file${i}.txt`, data: `This is a test file ${i}.` });
  const o = {};
  o.err = await errorOf((async () => {
    o.infos = await s.files.write(files, { user });
    o.read = [];
    for (const f of files)
      o.read.push(await s.files.read(f.path, { user }));
  })());
  return o;
};

scenarios.quick = async function () {
  // short programs, stdin closed: every one ends with its own exit code
  const s = sandbox();
  const codes = [];
  for (let i = 0; i < 40; i++) {
    const r = await s.commands.run('id -un').catch((e) => e);
    codes.push(r.exitCode);
  }
  return { codes };
};

// the benches' options: BENCH_CWD (a folder for a user whose home is not one)
const benchOpts = () => (process.env.BENCH_CWD ? { cwd: process.env.BENCH_CWD } : {});

scenarios.bench = async function () {
  // commands.run('true') round trips (ms), after 10 warm-up runs
  const s = sandbox();
  const n = Number(process.env.BENCH_N || 200);
  for (let i = 0; i < 10; i++) await s.commands.run('true', benchOpts());
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await s.commands.run('true', benchOpts());
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return { ms };
};

scenarios.stream = async function () {
  // 54 MB of output through commands.run: MB/s per run (BENCH_STREAM_N runs)
  const s = sandbox();
  const n = Number(process.env.BENCH_STREAM_N || 3);
  const mbs = [];
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const r = await s.commands.run('head -c 40000000 /dev/zero | base64',
      { ...benchOpts(), timeoutMs: 0 });
    const sec = Number(process.hrtime.bigint() - t0) / 1e9;
    bytes = r.stdout.length;
    mbs.push(bytes / 1e6 / sec);
  }
  return { mbs, bytes };
};

scenarios.oddNames = async function () {
  // a folder with names that are not UTF-8 (test_envd_utf8_names.py)
  const s = sandbox();
  const list = await s.files.list(process.env.E2B_TEST_DIR);
  return { names: list.map((e) => e.name), paths: list.map((e) => e.path) };
};

const name = process.argv[2];
try {
  const r = await scenarios[name]();
  process.stdout.write(JSON.stringify(r) + '\n');
  process.exit(0);
} catch (e) {
  process.stdout.write(JSON.stringify({ fatal: `${e.constructor.name}: ${e.message}`,
    stack: String(e.stack) }) + '\n');
  process.exit(1);
}

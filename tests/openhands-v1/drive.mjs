// drive.mjs — the published OpenHands TypeScript client
// (@openhands/typescript-client, pinned by package-lock.json) against a
// termd's api=openhands listener: RemoteWorkspace, BashClient,
// FileClient, ServerClient and BashWebSocketClient, unmodified. One
// scenario per run (`node drive.mjs <scenario>`), its observations as one
// JSON line on stdout; tests/regress/door/ohv1/test_openhands_v1_clients.py asserts
// on them. Env: OH_URL (http://127.0.0.1:PORT), OH_KEY (the full token),
// OH_HOME (a folder the scenario may write in).
import { createRequire } from 'node:module';
import { BashClient, FileClient, ServerClient } from '@openhands/typescript-client/clients';

const url = process.env.OH_URL;
const key = process.env.OH_KEY;
const home = process.env.OH_HOME;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Client bug: bash-websocket-client.js loads `ws` with a bare require(),
// which does not exist in an ES module on Node 20 (no global WebSocket
// either), so BashWebSocketClient never connects. A require in the
// global scope before the module loads is the workaround.
globalThis.require = createRequire(import.meta.url);
const { RemoteWorkspace, BashWebSocketClient } = await import('@openhands/typescript-client');

const ws = () => new RemoteWorkspace({ host: url, workingDir: home, apiKey: key });
const opts = { host: url, apiKey: key };

async function until(fn, what, ms = 60000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await sleep(20);
  }
}

const scenarios = {
  async server() {
    const s = new ServerClient(opts);
    return {
      root: await s.getRoot(), alive: await s.getAlive(), health: await s.getHealth(),
      ready: await s.getReady(), info: await s.getServerInfo(),
    };
  },

  async workspace_exec() {
    const w = ws();
    const a = await w.executeCommand('echo hi; echo err >&2; exit 4');
    const b = await w.executeCommand('pwd', '/tmp');
    const c = await w.executeCommand('seq 1 30000');
    return { a, b, c_len: c.stdout.length, c_last: c.stdout.slice(-6) };
  },

  async workspace_files() {
    const w = ws();
    const up = await w.fileUpload('uploaded by the TS client\n', home + '/ts/deep/up.txt');
    const down = await w.fileDownload(home + '/ts/deep/up.txt');
    const text = await w.downloadAsText(home + '/ts/deep/up.txt');
    return { up, down_content: down.content, down_size: down.file_size, text };
  },

  async workspace_git() {
    const w = ws();
    const repo = home + '/tsrepo';
    const r = await w.executeCommand(
      `mkdir -p ${repo} && cd ${repo} && git init -q && echo one > a.txt && git add . && ` +
      `git -c user.name=t -c user.email=t@t commit -qm c1 && echo two > a.txt && echo new > b.txt`);
    const changes = await w.gitChanges(repo);
    const diff = await w.gitDiff(repo + '/a.txt');
    const plain = await w.gitChanges('/');
    return { setup: r.exit_code, changes, diff, plain };
  },

  async bash_client() {
    const b = new BashClient(opts);
    const cmd = await b.startCommand('echo started; echo e >&2', undefined, 30);
    const outs = await until(async () => {
      const p = await b.searchEvents({ command_id__eq: cmd.id, kind__eq: 'BashOutput',
        sort_order: 'TIMESTAMP', limit: 100 });
      const last = p.items[p.items.length - 1];
      return last && last.exit_code !== null ? p.items : null;
    }, 'the command to end');
    const one = await b.getEvent(cmd.id);
    const batch = await b.batchGetEvents([cmd.id, '0123456789abcdef0123456789abcdef']);
    const exec = await b.executeCommand('echo exec; exit 2');
    let err422 = null;
    try {
      await b.searchEvents({ limit: 101 });
    } catch (e) {
      err422 = { status: e.status, message: String(e.message) };
    }
    const desc = await b.searchEvents({ sort_order: 'TIMESTAMP_DESC', limit: 2 });
    const cleared = await b.clearEvents();
    const after = await b.searchEvents({});
    return { cmd, outs, one, batch, exec, err422, desc, cleared, after_items: after.items.length };
  },

  async file_client() {
    const f = new FileClient(opts);
    const bytes = new Uint8Array(70000);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7) & 255;
    const up = await f.uploadFile(new Blob([bytes]), home + '/ts/bin/blob.bin', 'blob.bin');
    const got = new Uint8Array(await f.downloadFile(home + '/ts/bin/blob.bin'));
    let same = got.length === bytes.length;
    for (let i = 0; same && i < got.length; i++) same = got[i] === bytes[i];
    let missing = null;
    try {
      await f.downloadFile(home + '/ts/none');
    } catch (e) {
      missing = { status: e.status };
    }
    return { up, same, len: got.length, missing };
  },

  async websocket() {
    const seen = [];
    const errors = [];
    const c = new BashWebSocketClient({ host: url, apiKey: key, callback: (e) => seen.push(e),
      onError: (e) => errors.push(String(e.message)) });
    c.start();
    // the socket is up once an event made after it opened arrives
    const w = ws();
    await until(async () => {
      await w.executeCommand('echo ws-seen');
      return seen.some((e) => e.kind === 'BashOutput' && e.stdout === 'ws-seen\n');
    }, 'a pushed BashOutput', 30000);
    c.stop();
    const kinds = [...new Set(seen.map((e) => e.kind))].sort();
    return { kinds, errors, count: seen.length };
  },
};

const name = process.argv[2];
try {
  const out = await scenarios[name]();
  process.stdout.write(JSON.stringify({ ok: true, out }) + '\n');
  process.exit(0);
} catch (e) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(e && e.stack || e),
    status: e && e.status }) + '\n');
  process.exit(1);
}

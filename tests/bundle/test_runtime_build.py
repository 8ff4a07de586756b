"""tests/bundle/test_runtime_build.py — share/runtime/od-runtime-build: tags for plain, registry, nested,
digest and over-long names (under dash and busybox sh); clear errors; with buildah (chroot isolation,
a private overlay store, local bases committed from a busybox root and a Debian minbase root, nothing
pulled): runtime images built and reused, termd run inside them (buildah run), the entrypoint with a
token file, and a --dev rebuild after a change to termd that replaces only termd."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import make_busybox_root, make_minbase_root, need_root, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
BUILDER = os.path.normpath(os.path.join(HERE, "../../share/runtime/od-runtime-build"))


def builder(*args, env=None, shell="sh", timeout=600):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([shell, BUILDER] + list(args), capture_output=True, text=True, env=e, timeout=timeout)


# ---- tags (no engine needed)

TAGS = [
    ("ubuntu:22.04", "od_v9.8.7_image_ubuntu__22.04"),
    ("ubuntu", "od_v9.8.7_image_ubuntu__latest"),
    ("python:3.12-slim", "od_v9.8.7_image_python__3.12-slim"),
    ("docker.io/library/ubuntu:22.04", "od_v9.8.7_image_docker.io_s_library_s_ubuntu__22.04"),
    ("ghcr.io/org/team/img:1.2", "od_v9.8.7_image_ghcr.io_s_org_s_team_s_img__1.2"),
    ("registry.example.com:5000/a/b/c", "od_v9.8.7_image_registry.example.com__5000_s_a_s_b_s_c__latest"),
    ("alpine@sha256:0123abcd", "od_v9.8.7_image_alpine_at_sha256__0123abcd"),
]


@pytest.mark.parametrize("shell", ["sh", "dash", "busybox-sh"])
@pytest.mark.parametrize("base,tag", TAGS)
def test_tags(base, tag, shell):
    argv = ["busybox", "sh"] if shell == "busybox-sh" else [shell]
    if not shutil.which(argv[0]):
        pytest.skip(f"{argv[0]} is not installed")
    e = dict(os.environ)
    r = subprocess.run(argv + [BUILDER, "--base", base, "--tag-only", "--version", "9.8.7"],
                       capture_output=True, text=True, env=e)
    assert r.returncode == 0, r
    assert r.stdout == f"od_runtime:{tag}\n", r
    r = subprocess.run(argv + [BUILDER, "--base", base, "--tag-only", "--dev", "--version", "9.8.7"],
                       capture_output=True, text=True, env=e)
    assert r.stdout == f"od_runtime_dev:{tag}\n", r


def test_long_names_are_cut_to_128_and_stay_distinct():
    a = "registry.example.com/" + "x" * 150 + "/img:1"
    b = "registry.example.com/" + "x" * 150 + "/img:2"
    ta = builder("--base", a, "--tag-only", "--version", "1.0.0").stdout.strip().split(":", 1)[1]
    tb = builder("--base", b, "--tag-only", "--version", "1.0.0").stdout.strip().split(":", 1)[1]
    for t in (ta, tb):
        assert len(t) <= 128, t
        assert t.startswith("od_v1.0.0_image_") and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", t), t
    assert ta != tb
    assert ta.endswith("img__1") and tb.endswith("img__2")


@pytest.mark.parametrize("args,msg", [
    (["--tag-only"], "--base IMAGE is required"),
    (["--base", "has space", "--tag-only"], "is not an image name"),
    (["--base", "-x", "--tag-only"], "is not an image name"),
    (["--base", "a:1", "--engine", "rkt"], "--engine must be docker, podman or buildah"),
    (["--base", "a:1", "--pull", "always"], "--pull must be missing or never"),
    (["--base", "a:1", "--bogus"], "unknown argument '--bogus'"),
    (["--base", "a:1", "--bundle", "/nonexistent/b.tar.xz"], "no such file or folder"),
    (["--base"], "--base needs a value"),
])
def test_usage_errors(args, msg):
    r = builder(*args)
    assert r.returncode != 0 and msg in r.stderr, r
    assert "Traceback" not in r.stderr and r.stdout == "", r


def test_no_engine(bundle, tmp_path):
    # a PATH with busybox's tools and no docker, podman or buildah
    bindir = tmp_path / "bin"
    bindir.mkdir()
    bb = shutil.which("busybox")
    if not bb:
        pytest.skip("busybox is not installed")
    for tool in ("sh", "sed", "cksum", "cut", "tail", "head", "ls", "mktemp", "tar", "xz", "rm", "mkdir",
                 "cp", "cat", "chmod", "dirname"):
        os.symlink(bb, bindir / tool)
    r = subprocess.run([str(bindir / "sh"), BUILDER, "--base", "a:1", "--bundle", str(bundle)],
                       capture_output=True, text=True, env={"PATH": str(bindir)})
    assert r.returncode == 1, r
    assert "no container engine: install docker, podman or buildah" in r.stderr, r
    r = subprocess.run([str(bindir / "sh"), BUILDER, "--base", "a:1", "--engine", "podman", "--bundle",
                        str(bundle)], capture_output=True, text=True, env={"PATH": str(bindir)})
    assert r.returncode == 1 and "engine podman is not installed" in r.stderr, r


# ---- with buildah

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A private buildah store (overlay) and chroot isolation: nothing in /var/lib/containers."""
    need_root()
    if not shutil.which("buildah"):
        pytest.skip("buildah is not installed")
    d = tmp_path_factory.mktemp("buildah")
    conf = d / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{d}/root"\nrunroot = "{d}/run"\n')
    env = {"CONTAINERS_STORAGE_CONF": str(conf), "BUILDAH_ISOLATION": "chroot"}
    yield env
    e = dict(os.environ, **env)
    subprocess.run(["buildah", "rm", "--all"], env=e, capture_output=True)
    subprocess.run(["buildah", "rmi", "--all", "--force"], env=e, capture_output=True)
    # whatever the storage driver left mounted under the store
    with open("/proc/self/mounts") as f:
        mounts = [ln.split()[1] for ln in f if ln.split()[1].startswith(str(d))]
    for m in reversed(mounts):
        subprocess.run(["umount", "-l", m], capture_output=True)


def bh(store, *args, timeout=300, check=True):
    r = subprocess.run(["buildah"] + list(args), capture_output=True, text=True,
                       env=dict(os.environ, **store), timeout=timeout)
    if check:
        assert r.returncode == 0, r
    return r


def commit_root(store, rootdir, name):
    c = bh(store, "from", "scratch").stdout.strip()
    bh(store, "copy", c, f"{rootdir}/", "/")
    bh(store, "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "--cmd", "/bin/sh", c)
    bh(store, "commit", "-q", c, name)
    bh(store, "rm", c)


@pytest.fixture(scope="module")
def bases(store, tmp_path_factory):
    """Local base images: docker.io/library/busybox:od-test and docker.io/library/debian:od-minbase."""
    bb = tmp_path_factory.mktemp("bbroot") / "root"
    bb.mkdir()
    make_busybox_root(bb)
    commit_root(store, bb, "docker.io/library/busybox:od-test")
    mb = tmp_path_factory.mktemp("mbroot") / "root"
    mb.mkdir()
    make_minbase_root(mb)
    commit_root(store, mb, "docker.io/library/debian:od-minbase")
    return {"busybox": "busybox:od-test", "minbase": "debian:od-minbase"}


def image_config(store, image):
    d = json.loads(bh(store, "inspect", "--type", "image", image).stdout)
    return d["Docker"]["config"]


def run_in_image(store, image, script, files=()):
    """Runs a sh script inside a working container of image (buildah run, chroot isolation)."""
    c = bh(store, "from", image).stdout.strip()
    try:
        for src, dst in files:
            bh(store, "copy", c, str(src), dst)
        return subprocess.run(["buildah", "run", c, "--", "/bin/sh", "-c", script], capture_output=True,
                              text=True, env=dict(os.environ, **store), timeout=120)
    finally:
        bh(store, "rm", c, check=False)


SMOKE = r'''
set -e
echo "PATH=$PATH"
command -v termd
mkdir -p /tmp
termd --listen unix:/tmp/t.sock --cwd /root >/tmp/termd.log 2>&1 &
i=0; while [ ! -S /tmp/t.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
termctl --url unix:/tmp/t.sock run 'cd /tmp; X=$((6*7))'
termctl --url unix:/tmp/t.sock run 'echo inside $X $(pwd) $0'
set +e
termctl --url unix:/tmp/t.sock run 'f() { return 5; }; f'
echo "rc=$?"
sha256sum /opt/od_runtime/bin/termd 2>/dev/null || busybox sha256sum /opt/od_runtime/bin/termd
kill $! || { echo "termd is gone:"; cat /tmp/termd.log; }
'''


@pytest.mark.parametrize("kind", ["busybox", "minbase"])
def test_runtime_image_built_run_and_reused(store, bases, bundle, kind):
    base = bases[kind]
    t0 = time.monotonic()
    # a plugin's setup.sh runs in the build (busybox: agentskills finds no package manager, which is
    # not fatal; minbase would install Python from the network, so not there)
    plugin = ["--plugin", "agentskills"] if kind == "busybox" else []
    r = builder("--base", base, "--engine", "buildah", "--bundle", str(bundle), "--pull", "never", *plugin,
                env=store)
    took = time.monotonic() - t0
    tag = builder("--base", base, "--tag-only", "--bundle", str(bundle)).stdout.strip()
    assert r.returncode == 0, r
    assert r.stdout.strip() == tag and "building" in r.stderr, r
    steps = [h.get("created_by", "") for h in json.loads(bh(store, "inspect", "--type", "image", tag).stdout)["History"]]
    assert any("plugins/agentskills/setup.sh" in s for s in steps) == bool(plugin), steps
    print(f"\nimage build {kind}: {took:.1f} s")
    cfg = image_config(store, tag)
    assert cfg["Entrypoint"] == ["/opt/od_runtime/bin/od-runtime-start"]
    assert cfg["Healthcheck"]["Test"] == ["CMD", "/opt/od_runtime/bin/termd-healthz", "127.0.0.1:8421"]
    assert "8421/tcp" in cfg["ExposedPorts"]
    assert cfg["Labels"]["od.termd.version"] == re.search(r"od_v([^_]+)_", tag).group(1)
    assert any(e.startswith("PATH=/opt/od_runtime/bin:") for e in cfg["Env"]), cfg["Env"]

    r = run_in_image(store, tag, SMOKE)
    assert r.returncode == 0, r
    out = r.stdout
    assert "command -v" not in out and "/opt/od_runtime/bin/termd\n" in out, out
    shell = "/bin/bash" if kind == "minbase" else "/bin/sh"
    assert f"inside 42 /tmp {shell}\n" in out, out
    assert "rc=5\n" in out, out
    want = hashlib.sha256((bundle / "bin/termd").read_bytes()).hexdigest()
    assert want in out, out

    # the same version again: reused, not rebuilt
    before = bh(store, "inspect", "--type", "image", "--format", "{{.FromImageID}}", tag).stdout
    r = builder("--base", base, "--engine", "buildah", "--bundle", str(bundle), "--pull", "never", env=store)
    assert r.returncode == 0 and "reusing it" in r.stderr and "building" not in r.stderr, r
    assert bh(store, "inspect", "--type", "image", "--format", "{{.FromImageID}}", tag).stdout == before


def test_entrypoint_token_file_and_healthz(store, bases, bundle, tmp_path):
    tag = builder("--base", bases["busybox"], "--engine", "buildah", "--bundle", str(bundle), "--pull", "never",
                  env=store).stdout.strip()
    assert tag.startswith("od_runtime:")
    tok = tmp_path / "termd_token"
    tok.write_text("s3cret-token\n")
    port = free_port()
    # the image's entrypoint on an all-interfaces address (a free port: this machine is shared)
    script = f'''
mkdir -p /tmp
TERMD_LISTEN=0.0.0.0:{port} od-runtime-start >/tmp/start.log 2>&1 &
i=0; until termd-healthz 127.0.0.1:{port} >/dev/null 2>&1 || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done
termd-healthz 127.0.0.1:{port}
termctl --url ws://127.0.0.1:{port} --token-file /run/secrets/termd_token run 'echo authed'
termctl --url ws://127.0.0.1:{port} --token wrong ping; echo "wrong=$?"
kill $!; wait
cat /tmp/start.log
echo ---
rm /run/secrets/termd_token
TERMD_LISTEN=0.0.0.0:{port} timeout 20 od-runtime-start; echo "notoken=$?"
'''
    r = run_in_image(store, tag, script, files=[(tok, "/run/secrets/termd_token")])
    out = r.stdout + r.stderr
    assert "ok\nauthed\n" in r.stdout, out
    assert "wrong=2" in r.stdout, out
    # without a token file or TERMD_TOKEN termd refuses the all-interfaces address
    tail = out.split("---", 1)[1]
    assert "no token" in tail and "refusing to listen" in tail and "notoken=2" in tail, out


def test_dev_rebuild_replaces_only_termd(store, bases, bundle, tmp_path):
    base = bases["busybox"]
    runtime = builder("--base", base, "--engine", "buildah", "--bundle", str(bundle), "--pull", "never",
                      env=store).stdout.strip()
    # "a change to termd": a bundle whose termd differs (an ELF file still runs with bytes appended)
    changed = tmp_path / "bundle"
    shutil.copytree(bundle, changed, symlinks=True)
    with open(changed / "bin/termd", "ab") as f:
        f.write(b"dev-change-%d" % time.monotonic_ns())
    want = hashlib.sha256((changed / "bin/termd").read_bytes()).hexdigest()
    old = hashlib.sha256((bundle / "bin/termd").read_bytes()).hexdigest()
    t0 = time.monotonic()
    r = builder("--base", base, "--engine", "buildah", "--bundle", str(changed), "--pull", "never", "--dev",
                env=store)
    took = time.monotonic() - t0
    assert r.returncode == 0, r
    dev = r.stdout.strip()
    assert dev == runtime.replace("od_runtime:", "od_runtime_dev:"), r
    assert "reusing it" in r.stderr, r
    print(f"\ndev rebuild: {took:.1f} s")
    out = run_in_image(store, dev, SMOKE).stdout
    assert want in out and "inside 42 /tmp /bin/sh" in out, out
    assert old in run_in_image(store, runtime, SMOKE).stdout
    # one layer more than the runtime image, and that layer is small (termd, not the bundle again)
    h_dev = json.loads(bh(store, "inspect", "--type", "image", dev).stdout)["History"]
    h_run = json.loads(bh(store, "inspect", "--type", "image", runtime).stdout)["History"]
    assert len(h_dev) == len(h_run) + 1
    assert "COPY" in h_dev[-1].get("created_by", ""), h_dev[-1]


def test_openhands_flavour_runs_the_shim_at_openhands_path(store, bases, bundle):
    """--openhands: OpenHands' Docker runtime runs a fixed command line; in the
    image that path is openhands-shim, which maps it onto termd."""
    r = builder("--base", bases["busybox"], "--engine", "buildah", "--bundle", str(bundle), "--pull", "never",
                "--openhands", env=store)
    assert r.returncode == 0, r
    tag = r.stdout.strip()
    assert tag.startswith("od_runtime_openhands:od_v"), tag
    assert builder("--base", bases["busybox"], "--tag-only", "--openhands",
                   "--bundle", str(bundle)).stdout.strip() == tag
    cfg = image_config(store, tag)
    assert cfg["WorkingDir"] == "/openhands/code", cfg
    script = ("OH_SHIM_NO_USER=1 OH_SHIM_DRY_RUN=1 /openhands/micromamba/bin/micromamba run -n openhands "
              "poetry run python -u -m openhands.runtime.action_execution_server 30123 "
              "--working-dir /workspace --plugins agent_skills jupyter --username root --user-id 0")
    r = run_in_image(store, tag, script)
    assert r.returncode == 0, r
    argv = r.stdout.strip().split("\n")   # one argument a line
    assert argv[0] == "/opt/od_runtime/bin/termd", argv
    assert argv[argv.index("--listen") + 1] == "0.0.0.0:30123", argv
    assert argv[argv.index("--cwd") + 1] == "/workspace", argv
    assert argv[argv.index("--plugins") + 1] == "agentskills,jupyter,browser", argv
    assert argv[argv.index("--plugin-dir") + 1] == "/opt/od_runtime/plugins", argv
    assert "--insecure-no-token" in argv, argv


def test_base_not_found_and_build_failed(store, bases, bundle, tmp_path):
    r = builder("--base", "no-such-image:1", "--engine", "buildah", "--bundle", str(bundle), "--pull", "never",
                env=store)
    assert r.returncode == 1, r
    assert "base image no-such-image:1 not found" in r.stderr, r
    # a plugin whose setup fails: the build fails and the engine's last lines say why
    broken = tmp_path / "bundle"
    shutil.copytree(bundle, broken, symlinks=True)
    (broken / "plugins/broken").mkdir()
    (broken / "plugins/broken/setup.sh").write_text("#!/bin/sh\necho 'broken: the reason is here' >&2\nexit 3\n")
    os.chmod(broken / "plugins/broken/setup.sh", 0o755)
    r = builder("--base", bases["busybox"], "--engine", "buildah", "--bundle", str(broken), "--pull", "never",
                "--plugin", "broken", "--version", "0.0.0-broken", env=store)
    assert r.returncode == 1, r
    assert "buildah build of od_runtime:od_v0.0.0-broken_image_busybox__od-test failed" in r.stderr, r
    assert "broken: the reason is here" in r.stderr, r
    r = builder("--base", bases["busybox"], "--engine", "buildah", "--bundle", str(bundle), "--pull", "never",
                "--plugin", "nosuch", "--version", "0.0.0-x", env=store)
    assert r.returncode == 1 and "plugin nosuch: the bundle has no plugins/nosuch/setup.sh" in r.stderr, r


def test_builder_inside_the_bundle_takes_its_version(bundle):
    ver = subprocess.run([str(bundle / "bin/termd"), "--version"], capture_output=True, text=True).stdout.split()[1]
    r = subprocess.run(["sh", str(bundle / "share/runtime/od-runtime-build"), "--base", "ubuntu:22.04", "--tag-only"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r
    assert r.stdout == f"od_runtime:od_v{ver}_image_ubuntu__22.04\n", r

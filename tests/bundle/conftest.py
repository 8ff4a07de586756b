"""tests/bundle/conftest.py — fixtures for the bundle tests: the unpacked bundle, root filesystems
(busybox-only, Debian minbase from a cached mmdebstrap tarball), and a Chroot helper that runs the
bundle inside them through `unshare --mount --pid --fork` + chroot (its own /proc, /dev, devpts,
/tmp; every mount dies with the namespace, so nothing leaks even when a test fails). Root only."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time

import pytest

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "regress"))
from tdtest import free_port  # noqa: E402,F401  (the shared test helpers; the bundle tests import it from here)

BUNDLE_TAR = os.environ.get("BUNDLE_TAR", "")
ROOTS_CACHE = os.environ.get("BUNDLE_ROOTS", "")
MIRROR = os.environ.get("BUNDLE_MIRROR", "http://deb.debian.org/debian")
IN = "/opt/od_runtime"          # where the bundle sits inside the roots

# mounts /proc, /dev (a few nodes), a fresh devpts and /tmp in the root, then chroots with a clean env
SETUP = r'''
set -e
R=$1; shift
mount --make-rprivate /
mount -t proc proc "$R/proc"
mount -t tmpfs -o mode=755 tmpfs "$R/dev"
for n in null zero urandom random tty full; do touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
mkdir "$R/dev/pts"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
exec env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root TERM="${TD_TERM:-xterm}" \
  ${TD_ENV} chroot "$R" "$@"
'''


def need_root():
    if os.geteuid() != 0:
        pytest.skip("the bundle tests need root (chroot, mounts, unshare)")
    for tool in ("unshare", "chroot", "mount"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")


class Chroot:
    """A root filesystem with the bundle at /opt/od_runtime."""

    def __init__(self, path, name):
        self.path = str(path)
        self.name = name
        self.procs = []

    def host(self, p):
        return os.path.join(self.path, p.lstrip("/"))

    def cmd(self, argv, env=None):
        extra = " ".join(f"{k}={v}" for k, v in (env or {}).items())
        return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", SETUP, "sh",
                self.path] + list(argv), dict(os.environ, TD_ENV=extra,
                                              TD_TERM=(env or {}).get("TERM", "xterm"))

    def run(self, argv, env=None, timeout=60, input=None):
        """Runs argv inside the root (its own namespaces); returns CompletedProcess (text)."""
        cmd, e = self.cmd(argv, env)
        return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout, input=input)

    def spawn(self, argv, env=None, **kw):
        cmd, e = self.cmd(argv, env)
        p = subprocess.Popen(cmd, env=e, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                # unshare --kill-child: the namespace's first process gets SIGKILL, then all of it
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)
        self.procs = []


class Termd:
    """termd from the bundle, started inside a Chroot on a unix socket under the root's /run."""

    def __init__(self, root, args=(), env=None, tcp=None):
        self.root = root
        os.makedirs(root.host("/run/td"), exist_ok=True)
        sock = f"/run/td/t{len(root.procs)}.sock"
        if os.path.exists(root.host(sock)):
            os.unlink(root.host(sock))
        self.url = f"unix:{sock}"
        self.log = open(root.host(f"/run/td/termd{len(root.procs)}.log"), "w+")
        listen = tcp if tcp else self.url
        self.proc = root.spawn([f"{IN}/bin/termd", "--listen", listen, "--cwd", "/root"] + list(args),
                               env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_ready(sock, tcp)

    def wait_ready(self, sock, tcp):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"termd exited {self.proc.returncode}: {self.output()}")
            if tcp:
                host, port = tcp.rsplit(":", 1)
                try:
                    socket.create_connection((host, int(port)), timeout=1).close()
                    return
                except OSError:
                    pass
            elif os.path.exists(self.root.host(sock)):
                if self.ctl("ping", wait=3).returncode == 0:
                    return
            time.sleep(0.05)
        raise AssertionError(f"termd not ready in 30 s: {self.output()}")

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def ctl(self, *args, wait=None, env=None, timeout=60, input=None):
        pre = [f"{IN}/bin/termctl", "--url", self.url]
        if wait:
            pre += ["--wait", str(wait)]
        return self.root.run(pre + list(args), env=env, timeout=timeout, input=input)


@pytest.fixture(scope="session")
def bundle_tar():
    if not BUNDLE_TAR or not os.path.exists(BUNDLE_TAR):
        pytest.fail(f"BUNDLE_TAR={BUNDLE_TAR!r} does not exist: run make test-bundle (it builds it)")
    return BUNDLE_TAR


@pytest.fixture(scope="session")
def bundle(bundle_tar, tmp_path_factory):
    """The bundle unpacked in a fresh folder whose path has a space in it."""
    d = tmp_path_factory.mktemp("bundle") / "any where"
    d.mkdir()
    with tarfile.open(bundle_tar) as t:
        names = {n.split("/")[0] for n in t.getnames()}
        assert len(names) == 1, f"the tarball must hold one folder, not {names}"
        t.extractall(d)
    return d / names.pop()


def copy_bundle(bundle, root):
    dst = os.path.join(root, IN.lstrip("/"))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copytree(bundle, dst, symlinks=True)


def base_files(root):
    """/etc/hosts (docker always writes one; chroots have none), /run, /root, /tmp."""
    for d in ("etc", "run", "root", "tmp", "proc", "dev"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    os.chmod(os.path.join(root, "tmp"), 0o1777)
    with open(os.path.join(root, "etc/hosts"), "w") as f:
        f.write("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n")


def make_busybox_root(root):
    """A root with only busybox (no libc, no /lib, no bash, no terminfo, no CA certificates)."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(busybox):
        pytest.skip("busybox is not installed (busybox-static)")
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy2(busybox, os.path.join(root, "bin/busybox"))
    subprocess.run(["chroot", str(root), "/bin/busybox", "--install", "-s", "/bin"], check=True)
    base_files(root)
    with open(os.path.join(root, "etc/passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")
    with open(os.path.join(root, "etc/group"), "w") as f:
        f.write("root:x:0:\n")
    assert not os.path.exists(os.path.join(root, "bin/bash"))
    return root


def minbase_tarball():
    """Debian 12 minbase from mmdebstrap, cached as a tarball under the build folder."""
    if not ROOTS_CACHE:
        pytest.fail("BUNDLE_ROOTS is not set (make test-bundle sets it)")
    tar = os.path.join(ROOTS_CACHE, "bookworm-minbase.tar")
    if os.path.exists(tar):
        return tar
    if not shutil.which("mmdebstrap"):
        pytest.skip("mmdebstrap is not installed")
    os.makedirs(ROOTS_CACHE, exist_ok=True)
    tmp = tar + ".part"
    r = subprocess.run(["mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", "--quiet", "bookworm", tmp, MIRROR],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        pytest.fail(f"mmdebstrap failed ({r.returncode}): {r.stderr[-2000:]}")
    os.rename(tmp, tar)
    return tar


def make_minbase_root(root, bash=True):
    subprocess.run(["tar", "-C", str(root), "-xf", minbase_tarball()], check=True)
    base_files(root)
    if not bash:
        # an image with no bash: termd must fall back to /bin/sh (dash here)
        for p in ("bin/bash", "usr/bin/bash"):
            if os.path.lexists(os.path.join(root, p)):
                os.unlink(os.path.join(root, p))
    return root


ROOT_KINDS = ["busybox", "minbase", "minbase-nobash"]


@pytest.fixture(scope="module", params=ROOT_KINDS)
def root(request, bundle, tmp_path_factory):
    need_root()
    kind = request.param
    path = tmp_path_factory.mktemp(kind.replace("-", "_")) / "root"
    path.mkdir()
    if kind == "busybox":
        make_busybox_root(path)
    else:
        make_minbase_root(path, bash=(kind == "minbase"))
    copy_bundle(bundle, path)
    c = Chroot(path, kind)
    yield c
    c.stop_all()

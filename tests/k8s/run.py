"""run.py OUT — make test-k8s (not in make test): share/k8s against a real
API server. Starts etcd and kube-apiserver on loopback (ports chosen free,
state in a scratch folder under OUT), installs agent-sandbox's CRDs read
from its Go module at test time, `kubectl apply --dry-run=server` every
manifest in share/k8s, applies the SandboxTemplate, the SandboxWarmPool and
a SandboxClaim, runs agent-sandbox's controller and checks the Pods it
makes from termd's template (image, args, ports, probes, env, security
context), the Service, the NetworkPolicy and the claim's sandbox. There
is no kubelet and no scheduler: the Pods stay Pending; to see a claim adopt
a warm sandbox, the test marks the two warm Pods Running and Ready itself
(their status, as a kubelet would write it; termd never runs in them). Every process it starts is stopped at its end (by its own pid)."""

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]).resolve()
BIN = OUT / "bin"
MOD = OUT / "gopath/pkg/mod/sigs.k8s.io/agent-sandbox@v0.5.6"
T = 240.0
procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(name, argv, log_dir, env=None):
    log = open(log_dir / (name + ".log"), "wb")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                         stdin=subprocess.DEVNULL)
    procs.append((name, p, log_dir / (name + ".log")))
    return p


def stop_all():
    for name, p, _ in reversed(procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_for(pred, what, timeout=T):
    end = time.monotonic() + timeout
    while True:
        for name, p, log in procs:
            if p.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise SystemExit("test-k8s: %s exited (%s) while waiting for %s:\n%s"
                                 % (name, p.returncode, what, tail))
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise SystemExit("test-k8s: timed out waiting for " + what)
        time.sleep(0.5)


def certs(d):
    """a CA, a client certificate of system:masters, the service-account keys"""
    def ossl(*a):
        subprocess.run(["openssl"] + list(a), check=True, capture_output=True)
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
         "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/O=system:masters/CN=admin",
         "-keyout", str(d / "admin.key"), "-out", str(d / "admin.csr"))
    ossl("x509", "-req", "-in", str(d / "admin.csr"), "-CA", str(d / "ca.crt"), "-CAkey",
         str(d / "ca.key"), "-CAcreateserial", "-days", "2", "-out", str(d / "admin.crt"))
    ossl("genrsa", "-out", str(d / "sa.key"), "2048")
    ossl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))


def main():
    for b in ("etcd", "kube-apiserver", "kubectl", "agent-sandbox-controller"):
        if not (BIN / b).exists():
            raise SystemExit("test-k8s: %s was not built (tests/k8s/build-tools.sh)" % b)
    crds = sorted(glob.glob(str(MOD / "k8s/crds/*.yaml")))
    assert len(crds) == 4, crds
    d = Path(tempfile.mkdtemp(prefix="k8s-", dir=str(OUT)))
    try:
        run(d, crds)
    finally:
        stop_all()
        shutil.rmtree(d, ignore_errors=True)


def run(d, crds):
    certs(d)
    ec, ep, ap = free_port(), free_port(), free_port()
    start("etcd", [str(BIN / "etcd"), "--name", "t", "--data-dir", str(d / "etcd"),
                   "--listen-client-urls", "http://127.0.0.1:%d" % ec,
                   "--advertise-client-urls", "http://127.0.0.1:%d" % ec,
                   "--listen-peer-urls", "http://127.0.0.1:%d" % ep,
                   "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ep,
                   "--initial-cluster", "t=http://127.0.0.1:%d" % ep,
                   "--listen-metrics-urls", "http://127.0.0.1:%d" % free_port()], d)
    start("kube-apiserver", [
        str(BIN / "kube-apiserver"), "--etcd-servers", "http://127.0.0.1:%d" % ec,
        "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
        "--secure-port", str(ap), "--cert-dir", str(d / "serving"),
        "--client-ca-file", str(d / "ca.crt"), "--authorization-mode", "RBAC",
        "--service-account-issuer", "https://kubernetes.default.svc",
        "--service-account-key-file", str(d / "sa.pub"),
        "--service-account-signing-key-file", str(d / "sa.key"),
        "--service-cluster-ip-range", "10.96.0.0/16"], d)
    kc = d / "kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": "https://127.0.0.1:%d" % ap,
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "admin", "user": {"client-certificate": str(d / "admin.crt"),
                                             "client-key": str(d / "admin.key")}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "admin",
                                               "namespace": "default"}}]}))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(d),
           "KUBECONFIG": str(kc)}

    def kubectl(*args, check=True):
        r = subprocess.run([str(BIN / "kubectl")] + list(args), capture_output=True, text=True,
                           env=env, timeout=T)
        if check and r.returncode:
            raise SystemExit("test-k8s: kubectl %s: %s" % (" ".join(args), r.stderr[-2000:]))
        return r

    wait_for(lambda: kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
             "the API server to be ready")
    print("test-k8s: etcd and kube-apiserver %s up on 127.0.0.1:%d (kubectl %s)"
          % (json.loads(kubectl("get", "--raw", "/version").stdout)["gitVersion"], ap,
             json.loads(kubectl("version", "--client", "-o", "json").stdout)
             ["clientVersion"]["gitVersion"]))
    # no controller-manager: the default ServiceAccount the admission wants
    wait_for(lambda: kubectl("get", "namespace", "default", check=False).returncode == 0,
             "namespace default")
    kubectl("create", "serviceaccount", "default")
    for c in crds:
        kubectl("apply", "--server-side", "-f", c)
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
    print("test-k8s: agent-sandbox's CRDs installed from %s" % MOD.name)

    manifests = sorted(glob.glob(str(ROOT / "share/k8s/*.yaml")))
    for m in manifests:
        r = kubectl("apply", "--dry-run=server", "-f", m)
        print("test-k8s: dry-run=server %s: %s" % (Path(m).name,
                                                     " / ".join(r.stdout.split("\n")[:-1])))

    kubectl("apply", "-f", str(ROOT / "share/k8s/agent-sandbox.yaml"))
    cenv = dict(env)
    start("agent-sandbox-controller", [
        str(BIN / "agent-sandbox-controller"), "--extensions", "--leader-elect=false",
        "--enable-webhook=false", "--manage-webhook-certs=false",
        "--metrics-bind-address=0", "--health-probe-bind-address=0"], d, env=cenv)

    def pods():
        r = kubectl("get", "pods", "-l", "app.kubernetes.io/name=termd-agent-sandbox",
                    "-o", "json", check=False)
        return json.loads(r.stdout)["items"] if r.returncode == 0 else []

    def claimed():
        r = kubectl("get", "sandboxclaim", "termd-example", "-o", "json", check=False)
        if r.returncode:
            return None
        return ((json.loads(r.stdout).get("status") or {}).get("sandbox") or {}).get("name")

    warm = wait_for(lambda: (lambda ps: ps if len(ps) == 2 else None)(pods()),
                    "the warm pool's two Pods")
    for p in warm:
        check_pod(p)   # as the controller made them: Pending
    print("test-k8s: the warm pool made Pods %s, Pending (no kubelet)"
          % sorted(p["metadata"]["name"] for p in warm))
    # stand in for the kubelet: the warm Pods running and Ready, with an address
    # (TEST-NET-2, never routed), so that a claim adopts one
    for i, p in enumerate(warm):
        ip = "198.51.100.%d" % (10 + i)
        kubectl("patch", "pod", p["metadata"]["name"], "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {
                    "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                    "conditions": [{"type": "Ready", "status": "True"},
                                   {"type": "ContainersReady", "status": "True"}]}}))

    def sandboxes_ready():
        items = json.loads(kubectl("get", "sandboxes", "-o", "json").stdout)["items"]
        ready = [x for x in items if (x.get("status") or {}).get("podIPs") and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (x.get("status") or {}).get("conditions") or [])]
        return ready if len(ready) == 2 else None
    wait_for(sandboxes_ready, "the warm Sandboxes Ready")
    kubectl("apply", "-f", str(ROOT / "share/k8s/agent-sandbox-claim.yaml"))
    sbname = wait_for(claimed, "the claim's sandbox")
    claim = json.loads(kubectl("get", "sandboxclaim", "termd-example", "-o", "json").stdout)
    sb = json.loads(kubectl("get", "sandbox", sbname, "-o", "json").stdout)
    podname = (sb["metadata"].get("annotations") or {}).get("agents.x-k8s.io/pod-name", sbname)
    print("test-k8s: claim termd-example → sandbox %s, pod %s (launch-type %s)"
          % (sbname, podname, sb["metadata"].get("labels", {}).get("agents.x-k8s.io/launch-type")))
    # adopted from the warm pool: the sandbox keeps its pool-made name, and its Pod is the
    # warm Pod itself, so metadata.name (TERMD_SANDBOX_ID) is what status.sandbox.name says
    warm_names = {p["metadata"]["name"] for p in warm}
    assert sbname in warm_names and podname == sbname, (sbname, podname, warm_names)
    assert sbname.startswith("termd-agent-sandbox-")

    def claim_pod():
        for p in pods():
            if p["metadata"]["name"] == podname:
                return p
        return None
    pod = wait_for(claim_pod, "the claimed sandbox's Pod")
    # the claim's identity: its UID labels the Sandbox and its podTemplate, not the Pod
    # (the controller keeps agents.x-k8s.io/ labels off it); the Pod's name is the
    # sandbox's, what status.sandbox.name says (TERMD_SANDBOX_ID)
    uid = claim["metadata"]["uid"]
    assert sb["metadata"]["labels"]["agents.x-k8s.io/claim-uid"] == uid
    assert sb["spec"]["podTemplate"]["metadata"]["labels"]["agents.x-k8s.io/claim-uid"] == uid
    assert "agents.x-k8s.io/claim-uid" not in pod["metadata"]["labels"], pod["metadata"]
    check_pod(pod, running=True)
    for p in pods():
        check_pod(p, running=p["metadata"]["name"] in warm_names)
    print("test-k8s: %d Pods from termd's template checked (image, args, ports, probes, env, "
          "security context); phases %s (Pending but the two this test marked Running; no "
          "kubelet, no scheduler here)"
          % (len(pods()), sorted(p["status"].get("phase") for p in pods())))

    svc = wait_for(lambda: kubectl("get", "service", sbname, "-o", "json",
                                   check=False).stdout, "the sandbox's Service")
    svc = json.loads(svc)
    assert svc["spec"].get("clusterIP") == "None", svc["spec"]   # headless
    nps = wait_for(lambda: json.loads(kubectl("get", "networkpolicy", "-o", "json").stdout)
                   ["items"], "the template's NetworkPolicy")
    (np,) = nps
    ports_in = sorted(pt["port"] for r in np["spec"]["ingress"] for pt in r["ports"])
    assert ports_in == [8421, 8888], np["spec"]["ingress"]
    assert np["spec"]["podSelector"]["matchLabels"], np["spec"]
    sel = np["spec"]["podSelector"]["matchLabels"]
    assert all(pod["metadata"]["labels"].get(k) == v for k, v in sel.items()), (sel, pod)
    print("test-k8s: headless Service %s, NetworkPolicy %s (ingress ports %s, %d egress rules) "
          "selecting the Pods" % (sbname, np["metadata"]["name"], ports_in,
                                 len(np["spec"]["egress"])))
    print("test-k8s: ok")


def check_pod(pod, running=False):
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert c["image"] == "od_runtime:od_v0.1.0_image_ubuntu__22.04", c["image"]
    assert c["args"] == ["--listen", "0.0.0.0:8888,api=agent-sandbox", "--insecure-no-token"]
    ports = {p["containerPort"]: p for p in c["ports"]}
    assert set(ports) == {8888, 8421} and ports[8888]["name"] == "http"
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/" and c[probe]["httpGet"]["port"] == 8888
    env = {e["name"]: e for e in c["env"]}
    assert env["TERMD_SANDBOX_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["SANDBOX_BASE_DIR"]["value"] == "/app"
    assert env["TERMD_LISTEN"]["value"] == "0.0.0.0:8421"
    assert env["TERMD_TOKEN_FILE"]["value"] == "/run/secrets/termd-token/token"
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert spec["automountServiceAccountToken"] is False
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["termd-token"]["secret"].get("optional") is not True
    assert vols["termd-connect-token"]["secret"]["optional"] is True
    assert pod["status"].get("phase") == ("Running" if running else "Pending"), pod["status"]


if __name__ == "__main__":
    main()

"""drive.py URL — agent-sandbox's Python SDK (k8s_agent_sandbox, direct
mode: SandboxDirectConnectionConfig(api_url=URL)) against termd's
agent-sandbox listener, as an SDK user writes it: commands.run, files.write,
read, list, exists. No cluster: the Sandbox gets a K8sHelper that reads no
kubeconfig and finds no Sandbox object (so no X-Sandbox-Pod-IP), which is
what direct mode needs. Prints one JSON object of what the SDK returned."""

import json
import sys

from k8s_agent_sandbox.k8s_helper import K8sHelper
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox


class NoCluster(K8sHelper):
    def __init__(self):   # no kubeconfig, no API server
        pass

    def get_sandbox(self, name, namespace):
        return None


def main():
    sb = Sandbox(claim_name="termd-claim", sandbox_id="termd-sandbox",
                 connection_config=SandboxDirectConnectionConfig(api_url=sys.argv[1]),
                 k8s_helper=NoCluster())
    out = {}
    r = sb.commands.run("echo hello from termd")
    out["run"] = [r.stdout, r.stderr, r.exit_code]
    r = sb.commands.run("sh -c 'echo to-stderr >&2; exit 7'")
    out["run_fail"] = [r.stdout, r.stderr, r.exit_code]
    r = sb.commands.run("echo $HOME | cat")
    out["no_shell"] = r.stdout
    sb.files.write("hello.txt", "hi there\n")
    # the runtime makes no folders (upstream's open() fails: 500): a command does
    out["mkdir"] = sb.commands.run("mkdir -p data").exit_code
    sb.files.write("data/blob.bin", bytes(range(256)))
    out["read"] = sb.files.read("hello.txt").decode()
    out["read_bin"] = list(sb.files.read("data/blob.bin"))
    out["list"] = sorted([e.name, e.type, e.size] for e in sb.files.list("."))
    out["list_data"] = sorted([e.name, e.type, e.size] for e in sb.files.list("data"))
    out["exists"] = [sb.files.exists("hello.txt"), sb.files.exists("data/blob.bin"),
                     sb.files.exists("nope.txt")]
    r = sb.commands.run("cat hello.txt")
    out["cat"] = r.stdout
    r = sb.commands.run("cat data/blob.bin")   # not UTF-8: text mode's error, as upstream
    out["cat_bin"] = [r.stdout, r.stderr, r.exit_code]
    try:
        sb.files.write("../escape.txt", "x")
        out["escape_sdk"] = "sent"
    except ValueError:   # the SDK refuses it before sending
        out["escape_sdk"] = "refused"
    # past the SDK's own check: termd refuses
    for name, fn in (("escape", lambda: sb.files.write("../escape.txt", "x",
                                                        allow_unsafe_paths=True)),
                     ("read_escape", lambda: sb.files.read("../../etc/hostname",
                                                           allow_unsafe_paths=True))):
        try:
            fn()
            out[name] = "done"
        except Exception as e:
            resp = getattr(getattr(e, "__cause__", None), "response", None)
            out[name] = [type(e).__name__, getattr(resp, "status_code", None)]
    print(json.dumps(out))


main()

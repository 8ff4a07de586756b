#!/bin/sh
# build-tools.sh OUT — builds what make test-k8s runs into OUT/bin (GOPATH and
# GOCACHE under OUT, versions pinned by tests/k8s/tools/go.mod): kube-apiserver
# and kubectl (k8s.io/kubernetes v1.36.3), etcd (go.etcd.io/etcd/server/v3
# v3.6.8: Debian's etcd-server is 3.4.23, and kubernetes 1.36's hack/lib/etcd.sh
# wants 3.6.8 at least) and
# agent-sandbox's controller (sigs.k8s.io/agent-sandbox v0.5.6). Gentle on a
# shared machine: nice 19, one build job, one Go thread.
set -e
out=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")/tools" && pwd)
export GOPATH="$out/gopath" GOCACHE="$out/gocache" GOFLAGS=-mod=mod GOMAXPROCS=1 \
       GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$out/bin"
cd "$here"
stamp=$(cat go.mod go.sum "$0" | sha256sum | cut -c1-16)
# k8s.io/component-base/version's, as kubernetes' own build sets them (kubectl
# version and the API server's /version refuse the unset default)
kv=k8s.io/component-base/version
kver="-X $kv.gitVersion=v1.36.3 -X $kv.gitMajor=1 -X $kv.gitMinor=36 -X $kv.gitTreeState=clean"
build() {   # build NAME PACKAGE [LDFLAGS]: skipped when built from these pins already
	if [ -x "$out/bin/$1" ] && [ "$(cat "$out/bin/.$1.stamp" 2>/dev/null)" = "$stamp" ]; then
		return 0
	fi
	echo "build-tools: building $1 ($2)"
	nice -n 19 go build -p 1 -trimpath -ldflags "${3:-}" -o "$out/bin/$1" "$2"
	echo "$stamp" > "$out/bin/.$1.stamp"
}
build etcd ./etcd
build agent-sandbox-controller sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kver"
build kubectl k8s.io/kubernetes/cmd/kubectl "$kver"

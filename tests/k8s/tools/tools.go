//go:build tools

// tools.go — the commands make test-k8s builds, so go.mod and go.sum pin them
package k8stools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"
)

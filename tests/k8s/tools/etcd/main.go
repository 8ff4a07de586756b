// etcd for make test-k8s: the server module's etcdmain, as etcd's own main does
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

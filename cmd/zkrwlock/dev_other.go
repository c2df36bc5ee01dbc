//go:build !linux

package main

// dev is Linux-only: internal/zkserver, which it runs, uses the
// parent-death signal so that no server outlives zkrwlock.
func dev(std stdio, servers int, logServer bool) error {
	return fail(exitUnavailable, "zkrwlock dev runs only on Linux; start a ZooKeeper server yourself and set --zk or ZOOKEEPER_SERVERS")
}

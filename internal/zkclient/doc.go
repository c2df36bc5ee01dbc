// Package zkclient is what a lock needs from ZooKeeper: requests that take
// a context and say which session served them, and watches shared per
// connection. It keeps the lease clock, which tells when a holder's session
// can no longer be shown alive, and the session timeout the server
// granted. It knows nothing of locks: the lock's holds are Holders to it.
//
// One word per idea here: a Client is referenced (Ref, Unref), never
// acquired or released, which are the lock's words.
package zkclient

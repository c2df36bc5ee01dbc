// Package zkclient is what a lock needs from ZooKeeper. Its requests take
// a context and say which session served them, and its watches are shared
// per connection. It keeps the session timeout the server granted, and the
// lease clock, which tells when a holder's session can no longer be shown
// alive. The package knows nothing of locks. To it, the lock's holds are
// Holders.
//
// One word per idea here. A Client is referenced with Ref and Unref. It is
// never acquired or released, since those are the lock's words.
package zkclient

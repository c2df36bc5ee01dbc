package integration

import (
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A directory only alice may use (a digest ACL): a client that is not
// alice is told what a Go program does about it, in one parenthesis that
// the command line replaces with its own advice.
func TestNoAuthMessageAdvisesAddAuth(t *testing.T) {
	srv := sharedServer(t)
	alice := connect(t, srv.ConnectString(), 0)
	require.NoError(t, alice.conn.AddAuth("digest", []byte("alice:secret")))
	const dir = "/noauth-message"
	_, err := alice.conn.Create(dir, nil, 0, zk.DigestACL(zk.PermAll, "alice", "secret"))
	require.NoError(t, err)
	t.Cleanup(func() { alice.conn.Delete(dir, -1) })

	_, err = connect(t, srv.ConnectString(), 0).lock(t, dir).Lock(testContext(t))
	require.ErrorIs(t, err, zk.ErrNoAuth)
	assert.Regexp(t, `may not delete nodes in /noauth-message, so it could never release a grant there `+
		`\(no entry of the directory's ACL allows DELETE to an identity this client has: add one, such as digest user:password, `+
		`with zk.Conn.AddAuth before locking\)$`, err.Error())
}

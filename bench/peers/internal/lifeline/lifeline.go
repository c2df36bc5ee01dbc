// Package lifeline ties a helper process's life to its parent's: the
// servers and proxies that scripts/compare-peers.sh starts must not outlive
// it, even when it is killed with no chance to stop them.
package lifeline

import (
	"os"
	"syscall"
)

// Tie asks the kernel to send this process SIGTERM when its parent exits
// (Linux; elsewhere it does nothing), so a SIGTERM handler runs the usual
// shutdown. If the parent is already gone, it sends the signal itself.
func Tie() {
	if !tie(syscall.SIGTERM) {
		return
	}
	if os.Getppid() == 1 { // reparented before the tie: the parent has exited
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}

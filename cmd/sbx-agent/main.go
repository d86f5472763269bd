// Command sbx-agent is the init process (PID 1) of every sbx sandbox. It
// listens on /.sbx/run/agent.sock, a Unix socket that runsc exposes on the
// host (--host-uds=create), spawns processes on sbxd's request and streams
// their output back; as PID 1 it reaps orphaned processes. It must be built
// static (CGO_ENABLED=0): images need not have a C library.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sbxhq/sbx/internal/agent"
)

// sbx-agent [--socket PATH]   serve (as the sandbox's init)
// sbx-agent hook              run by runsc around a checkpoint (see agent.Hook)
func main() {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	if len(os.Args) > 1 && os.Args[1] == "hook" {
		mode := os.Getenv("GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE")
		if err := agent.Hook(agent.ControlSocket, mode); err != nil {
			logf("sbx-agent hook %s: %v", mode, err)
			os.Exit(1)
		}
		return
	}
	sock := flag.String("socket", "/.sbx/run/agent.sock", "Unix socket to listen on")
	flag.Parse()
	srv, err := agent.NewServer(*sock, agent.ControlSocket, logf)
	if err != nil {
		logf("sbx-agent: %v", err)
		os.Exit(1)
	}
	go srv.WatchSocket(time.Second)
	srv.Wait()
}

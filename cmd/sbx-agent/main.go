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

// sbx-agent [--socket PATH] [--control NAME] [--root DIR]   serve (as the sandbox's init)
// sbx-agent hook                                            run by runsc around a checkpoint (see agent.Hook)
//
// --control names the abstract socket of quiesce requests (default
// agent.ControlSocket, which the hook dials). Only the host-process fake
// runtime (internal/runtime/fake) sets it: abstract socket names are per
// network namespace, and every fake agent shares the host's. It grants
// nothing in a sandbox, where sbxd alone chooses the init's arguments and
// any process may already listen on an abstract socket.
//
// --root DIR (agent.SetRoot) is the fake's too: the file operations resolve
// beneath DIR as if it were /, and set_hostname leaves the host's name
// alone. sbxd never passes it to a sandbox's init; a process in a sandbox
// that runs the agent with it only confines itself further.
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
	control := flag.String("control", agent.ControlSocket, "abstract Unix socket (@name) of quiesce requests")
	root := flag.String("root", "", "host directory the file operations treat as / (the fake runtime's; never in a sandbox)")
	flag.Parse()
	if *root != "" {
		if err := agent.SetRoot(*root); err != nil {
			logf("sbx-agent: --root: %v", err)
			os.Exit(1)
		}
	}
	srv, err := agent.NewServer(*sock, *control, logf)
	if err != nil {
		logf("sbx-agent: %v", err)
		os.Exit(1)
	}
	go srv.WatchSocket(time.Second)
	srv.Wait()
}

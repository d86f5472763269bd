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

func main() {
	sock := flag.String("socket", "/.sbx/run/agent.sock", "Unix socket to listen on")
	flag.Parse()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	srv, err := agent.NewServer(*sock, logf)
	if err != nil {
		logf("sbx-agent: %v", err)
		os.Exit(1)
	}
	go srv.WatchSocket(*sock, time.Second)
	if err := srv.Serve(); err != nil {
		logf("sbx-agent: %v", err)
		os.Exit(1)
	}
}

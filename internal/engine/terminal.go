package engine

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/agent"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// TerminalReplayBytes is how much of a terminal's kept output an attach
// replays (the latest bytes), so that the screen is not empty: 64 KiB.
const TerminalReplayBytes = 64 << 10

// AttachTerminal attaches to the terminal of process pid, started in
// sandbox idOrName by a terminal exec (GET .../exec?tty=1), or in the
// sandbox a snapshot or fork copied it from (same pid). The latest
// TerminalReplayBytes of its output come first; what is read from stdin is
// typed on it; size, when not nil, is set first (rows and cols 1..1000). A
// suspended sandbox is resumed first. Closing the process only detaches.
//
// Errors: ErrProcessNotFound for a pid the sandbox's agent does not know;
// ErrInvalidArgument naming pid for a process without a terminal, naming
// size for a bad size; ErrConflict when another client is attached to it
// (one at a time) or the sandbox is not running; the errors of Get.
func (e *Engine) AttachTerminal(ctx context.Context, idOrName string, pid int, size *api.Winsize, stdin io.Reader) (*Process, error) {
	if size != nil && (size.Rows == 0 || size.Cols == 0 || size.Rows > 1000 || size.Cols > 1000) {
		return nil, errdefs.Invalid("size", "%dx%d: rows and cols are 1..1000", size.Rows, size.Cols)
	}
	sb, err := e.attachable(ctx, idOrName, "attach to a terminal")
	if err != nil {
		return nil, err
	}
	release, err := e.claimTerminal(sb.ID, sb.Name, pid)
	if err != nil {
		return nil, err
	}
	cl := e.agentFor(sb)
	ps, err := cl.Ps(ctx)
	if err != nil {
		release()
		return nil, e.sandboxErr(ctx, sb, err)
	}
	var offset int64
	found := false
	for _, p := range ps {
		if p.PID == pid {
			found = true
			offset = max(0, p.OutputBytes-TerminalReplayBytes)
		}
	}
	if !found {
		release()
		return nil, errdefs.New(errdefs.ErrProcessNotFound, "no process %d started by exec in sandbox %q", pid, sb.Name)
	}
	actx, cancel := context.WithCancel(ctx)
	epoch := e.quiesceEpoch(sb.ID)
	restores := e.restoreCount(sb.ID)
	var asize *agent.Winsize
	if size != nil {
		asize = &agent.Winsize{Rows: size.Rows, Cols: size.Cols}
	}
	p, err := cl.AttachTerminal(actx, pid, offset, asize, nil)
	if err != nil {
		cancel()
		release()
		var ae *agent.Error
		if errors.As(err, &ae) {
			switch ae.Kind {
			case agent.FailNotFound:
				return nil, errdefs.New(errdefs.ErrProcessNotFound, "%s", ae.Message)
			case agent.FailInvalid:
				return nil, errdefs.Invalid("pid", "%s", ae.Message)
			}
		}
		return nil, e.sandboxErr(ctx, sb, err)
	}
	proc := &Process{p: p, e: e, ctx: ctx, actx: actx, cancel: cancel, epoch: epoch, Sandbox: sb, done: e.busy(sb.ID),
		tty: true, release: release, restores: restores, swapped: make(chan struct{})}
	if stdin != nil {
		go proc.typeInput(stdin)
	}
	return proc, nil
}

// claimWait is how long an attach waits for the client attached before it
// to let go: one that closed its terminal just now (to attach again, say)
// is still being released.
const claimWait = 2 * time.Second

// claimTerminal records a client attached to the terminal of process pid
// in sandbox id (named name), or fails with ErrConflict when one still is
// after claimWait. The returned func ends the claim (once; later calls do
// nothing).
func (e *Engine) claimTerminal(id, name string, pid int) (func(), error) {
	in := e.liveInstance(id)
	timer := time.NewTimer(claimWait)
	defer timer.Stop()
	for {
		in.mu.Lock()
		held := in.terminals[pid]
		if held == nil {
			defer in.mu.Unlock()
			return e.claimLocked(in, pid), nil
		}
		in.mu.Unlock()
		select {
		case <-held:
		case <-timer.C:
			return nil, errdefs.Conflictf("process %d in sandbox %q already has a terminal attached: one client at a time; close the other one (or end its process)", pid, name)
		}
	}
}

// forceClaimTerminal claims the terminal of a process that just started
// (a pid left claimed is a previous boot's).
func (e *Engine) forceClaimTerminal(id string, pid int) func() {
	in := e.liveInstance(id)
	in.mu.Lock()
	defer in.mu.Unlock()
	return e.claimLocked(in, pid)
}

func (e *Engine) claimLocked(in *instance, pid int) func() {
	if in.terminals == nil {
		in.terminals = map[int]chan struct{}{}
	}
	gen := make(chan struct{}) // closed when this claim ends
	in.terminals[pid] = gen
	done := false
	return func() {
		in.mu.Lock()
		defer in.mu.Unlock()
		if done {
			return
		}
		done = true
		close(gen)
		if in.terminals[pid] == gen { // not taken over meanwhile
			delete(in.terminals, pid)
		}
	}
}

// noteRestore records that sandbox id's disk is being restored (to what,
// e.g. "checkpoint v3"): the processes it runs end with it.
func (e *Engine) noteRestore(id, to string) {
	in := e.liveInstance(id)
	in.mu.Lock()
	in.restores++
	in.restoredTo = to
	in.mu.Unlock()
}

// restoreCount is how many disk restores sandbox id had (noteRestore).
func (e *Engine) restoreCount(id string) int {
	in := e.liveInstance(id)
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.restores
}

// restored is the error for a wait cut by a disk restore of the sandbox
// (ErrConflict naming it): the process ended with it. Nil when none came
// since the process was attached.
func (p *Process) restored() error {
	in := p.e.liveInstance(p.Sandbox.ID)
	in.mu.Lock()
	n, to := in.restores, in.restoredTo
	in.mu.Unlock()
	if n == p.restores {
		return nil
	}
	return errdefs.Conflictf("sandbox %q was restored to %s while process %d ran: its processes ended with the restore", p.Sandbox.Name, to, p.p.PID)
}

package engine

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/store"
)

// watch starts a monitor of sandbox id's host process: when it ends without
// sbxd asking (an OOM kill by the memory cgroup, a crash), the sandbox is
// marked stopped with the reason, and its container is cleaned up. runsc
// sends no event for an OOM kill (PLATFORM.md), so the monitor waits on a
// pidfd of the sandbox process and reads the cgroup's oom_kill counter.
func (e *Engine) watch(id string) {
	ctx, cancel := context.WithCancel(e.ctx)
	in := e.instance(id)
	in.mu.Lock()
	if in.monitor != nil {
		in.monitor()
	}
	in.monitor = cancel
	in.mu.Unlock()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		e.monitor(ctx, id)
	}()
}

// unwatch stops the monitor of id: sbxd itself is about to stop it.
func (e *Engine) unwatch(id string) {
	in := e.peekInstance(id)
	if in == nil {
		return
	}
	in.mu.Lock()
	if in.monitor != nil {
		in.monitor()
		in.monitor = nil
	}
	in.mu.Unlock()
}

func (e *Engine) monitor(ctx context.Context, id string) {
	st, err := e.rt.State(ctx, id)
	if err != nil || st.PID <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(st.PID, 0)
	if err != nil {
		// The process is already gone.
		e.handleExit(ctx, id)
		return
	}
	defer unix.Close(fd)
	// The poll also waits on a pipe whose write end is closed when ctx
	// ends, so an unwatch or a Close wakes it at once (a poll timeout
	// made every Close of the engine wait up to a second).
	var stop [2]int
	if err := unix.Pipe2(stop[:], unix.O_CLOEXEC); err != nil {
		e.log.Warn("monitor: pipe", "id", id, "err", err)
		return
	}
	defer unix.Close(stop[0])
	cancelWake := context.AfterFunc(ctx, func() { unix.Close(stop[1]) })
	defer func() {
		if cancelWake() {
			unix.Close(stop[1])
		}
	}()
	for ctx.Err() == nil {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(stop[0]), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents != 0 {
			e.handleExit(ctx, id)
			return
		}
	}
}

// handleExit records that sandbox id stopped on its own.
func (e *Engine) handleExit(ctx context.Context, id string) {
	e.noteExit(ctx, id)
}

// noteExit checks whether running sandbox id has stopped on its own and, if
// so, records it stopped with the reason (read before the container and
// its cgroup are removed). It returns the sandbox as recorded afterwards;
// nil if it is gone (deleted).
func (e *Engine) noteExit(ctx context.Context, id string) *store.Sandbox {
	unlock, err := e.lockID(ctx, id, id, "stop", lockOrWait)
	if err != nil {
		return nil
	}
	defer unlock()
	sb, err := e.getLocked(context.WithoutCancel(ctx), id)
	if err != nil {
		return nil
	}
	if sb.State != api.StateRunning {
		return sb
	}
	st, err := e.rt.State(ctx, id)
	if err != nil || st.Status == runtime.StatusRunning || st.Status == runtime.StatusPaused {
		return sb
	}
	reason := "exited: the sandbox's init ended"
	if e.rt.OOMKilled(id) {
		reason = fmt.Sprintf("oom_killed: the sandbox passed its %d MB memory limit", sb.MemoryMB)
	}
	e.log.Warn("sandbox stopped on its own", "sandbox", sb.Name, "id", id, "reason", reason)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	e.unwatch(id)
	if err := e.stopLocked(dctx, sb, reason); err != nil {
		e.log.Error("record stopped sandbox", "sandbox", sb.Name, "err", err)
	}
	if sb.Pooled {
		_ = e.deleteSandboxLocked(dctx, sb)
		e.pool.remove(id, true)
		return nil
	}
	return sb
}

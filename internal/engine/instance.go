package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sbxhq/sbx/internal/agent"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// instance is what sbxd keeps in memory of one sandbox (by id) besides its
// record: its lifecycle lock and the state of its requests in flight. The
// engine makes it on first use and forgets it when the sandbox is deleted
// (forgetInstance); what reads it without changing it (peekInstance) does
// not make one.
type instance struct {
	id   string
	lock *opLock

	mu sync.Mutex // guards the fields below
	// gone is set when the engine forgot it (its sandbox was deleted).
	gone bool
	// agent is the client of its agent, kept while it runs (agentFor).
	agent *agent.Client
	// monitor stops the watch of its host process (watch, unwatch).
	monitor context.CancelFunc
	// capture cancels the capture of its disk in progress, for a delete
	// (captureContext, cancelCapture).
	capture context.CancelCauseFunc
	// quiesce counts its captures; execs that outlive one attach again
	// (beginQuiesce, quiesceEpoch, waitQuiesce).
	quiesce quiesce
	// inflight counts requests in flight (exec, files, ports) and
	// lastActive is when the last one began or ended: what the idle
	// timeout measures (busy, idleFor).
	inflight   int
	lastActive time.Time
	// idleSuspend is set, under mu, by the idle loop when it decided to
	// suspend the sandbox (no request in flight); a request that begins
	// meanwhile waits for the suspend and wakes the sandbox again.
	idleSuspend bool
	// ports are the open connections of DialPort, closed when it stops
	// (trackPortConn, closePortConns).
	ports map[*portConn]bool
	// terminals are the pids whose terminal has a client attached (one
	// at a time: claimTerminal), each with the claim that holds it.
	terminals map[int]chan struct{}
	// restores counts its disk restores and restoredTo names the latest
	// ("checkpoint v3"): a terminal cut by one says so (noteRestore).
	restores   int
	restoredTo string
}

// opLock serialises lifecycle operations on one sandbox and names the one
// that holds it, for conflict messages. It is a channel semaphore so that
// a waiter can give up with its context; waiters are served in the order
// they came. (A lock shared by several sbxd nodes would be a lease with
// the same three calls.)
type opLock struct {
	ch      chan struct{}
	mu      sync.Mutex
	op      string // what holds it (or last held it)
	waiting int    // how many wait for it
}

func newOpLock() *opLock { return &opLock{ch: make(chan struct{}, 1)} }

// try takes the lock for op, or reports false and the operation holding it.
func (l *opLock) try(op string) (release func(), holder string, ok bool) {
	select {
	case l.ch <- struct{}{}:
		l.setHolder(op)
		return l.release, "", true
	default:
		return nil, l.holder(), false
	}
}

// wait takes the lock for op, waiting for the operation that holds it;
// it fails with ctx's error when ctx ends first. A free lock is taken
// even when ctx has ended.
func (l *opLock) wait(ctx context.Context, op string) (release func(), err error) {
	if release, _, ok := l.try(op); ok {
		return release, nil
	}
	l.mu.Lock()
	l.waiting++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.waiting--
		l.mu.Unlock()
	}()
	select {
	case l.ch <- struct{}{}:
		l.setHolder(op)
		return l.release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *opLock) release() { <-l.ch }

func (l *opLock) setHolder(op string) {
	l.mu.Lock()
	l.op = op
	l.mu.Unlock()
}

// waiters is how many wait for the lock.
func (l *opLock) waiters() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting
}

// holder names the operation that holds (or last held) the lock.
func (l *opLock) holder() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.op == "" {
		return "another operation"
	}
	return l.op
}

// instance returns sandbox id's instance, made on first use. Lifecycle
// operations take it through lockID and read the record under its lock
// (getLocked forgets it when the record is gone); what works on a record
// read without the lock uses liveInstance.
func (e *Engine) instance(id string) *instance {
	in, _ := e.instanceMade(id)
	return in
}

// instanceMade returns sandbox id's instance and whether this call made it.
func (e *Engine) instanceMade(id string) (*instance, bool) {
	e.instMu.Lock()
	defer e.instMu.Unlock()
	in, ok := e.insts[id]
	if !ok {
		if e.insts == nil {
			e.insts = map[string]*instance{}
		}
		in = &instance{id: id, lock: newOpLock()}
		e.insts[id] = in
	}
	return in, !ok
}

// liveInstance returns sandbox id's instance for a request that read the
// record without the sandbox's lock (exec, files, ports: busy, agentFor,
// trackPortConn). Such a record may be of a sandbox deleted since, whose
// instance the delete forgot: one made anew here must not stay. So when
// this call makes the instance it reads the record again and, if it is
// gone, forgets the instance (and marks it gone: see forgetInstance). A
// delete removes the record before it forgets the instance, so either the
// delete's forget comes after the make (and drops it) or the record is
// already gone when read here. The read happens only on a make: once per
// sandbox per sbxd run, not per request.
func (e *Engine) liveInstance(id string) *instance {
	in, made := e.instanceMade(id)
	if made {
		if _, err := e.st.GetSandbox(context.WithoutCancel(e.ctx), id); errdefs.IsNotFound(err) {
			e.forgetInstance(id)
		}
	}
	return in
}

// peekInstance returns sandbox id's instance, or nil when it has none.
func (e *Engine) peekInstance(id string) *instance {
	e.instMu.Lock()
	defer e.instMu.Unlock()
	return e.insts[id]
}

// forgetInstance drops sandbox id's instance (it was deleted). Holders of
// it keep using it; its lock, still held by the delete, is then handed to
// its waiters, which find the record gone.
//
// The instance is marked gone: a request that still holds it (it read the
// record before the delete) makes no agent client on it (agentFor), and a
// client made on it before is closed.
func (e *Engine) forgetInstance(id string) {
	e.instMu.Lock()
	in := e.insts[id]
	delete(e.insts, id)
	e.instMu.Unlock()
	if in != nil {
		in.mu.Lock()
		in.gone = true
		cl := in.agent
		in.agent = nil
		in.mu.Unlock()
		if cl != nil {
			cl.Close() // made by a request between the delete's dropAgent and now
		}
	}
}

// instanceCount is the number of sandboxes sbxd keeps an instance of.
func (e *Engine) instanceCount() int {
	e.instMu.Lock()
	defer e.instMu.Unlock()
	return len(e.insts)
}

// lockHolder names the operation that holds (or last held) id's lock.
func (e *Engine) lockHolder(id string) string {
	if in := e.peekInstance(id); in != nil {
		return in.lock.holder()
	}
	return "another operation"
}

// quiesceOf returns sandbox id's capture count (zero when it has no
// instance).
func (e *Engine) quiesceOf(id string) quiesce {
	in := e.peekInstance(id)
	if in == nil {
		return quiesce{}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.quiesce
}

// lockMode is what an operation does when another one holds the sandbox's
// lock.
type lockMode int

const (
	// lockOrConflict answers ErrConflict at once, naming the operation in
	// progress (`sandbox "x": snapshot is in progress`).
	lockOrConflict lockMode = iota
	// lockOrWait waits for it, as long as the caller's ctx lasts.
	lockOrWait
)

// lockSandbox finds sandbox idOrName and takes its lock for op (see
// lockFound).
func (e *Engine) lockSandbox(ctx context.Context, idOrName, op string, mode lockMode) (*store.Sandbox, func(), error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, nil, err
	}
	return e.lockFound(ctx, sb, op, mode)
}

// lockFound takes the lock of sb, found by the caller, for op, and
// returns its record read again under the lock; a sandbox deleted
// meanwhile is ErrSandboxNotFound. Every lifecycle operation on an
// existing sandbox takes its lock this way. Which ones wait for the
// operation in progress and which answer 409 (docs/api.md, "Concurrent
// requests on one sandbox", says the same to users):
//
//	operation                                       mode
//	checkpoint, restore, snapshot, fork, stop       lockOrConflict
//	suspend, resume, PATCH (rename, labels, idle),  lockOrWait
//	  network rules, a guarded exec's rollback
//	  (restore a snapshot in place)
//	exec, files, process list on a stopped or       lockOrWait ("boot"; ensureRunning)
//	  suspended sandbox
//	exec, files, ports, logs on a running one       no lock
//	delete                                          lockOrConflict; then, after cancelling
//	                                                a capture in progress, lockOrWait for
//	                                                DeleteWait at most (lockForDelete)
//	automatic idle suspend                          lockOrConflict: skips a busy sandbox
//
// sbxd's own work takes the lock of an id directly (lockID): a create (a
// new id), a claim of a warm sandbox (lockOrConflict); the monitor's
// record of an exit, the warm pool's check of a booted sandbox, the
// connect rules dropped after a delete (lockOrWait).
func (e *Engine) lockFound(ctx context.Context, sb *store.Sandbox, op string, mode lockMode) (*store.Sandbox, func(), error) {
	unlock, err := e.lockID(ctx, sb.ID, sb.Name, op, mode)
	if err != nil {
		return nil, nil, err
	}
	cur, err := e.getLocked(ctx, sb.ID)
	if err == nil && cur.Pooled {
		err = errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", sb.ID)
	}
	if err != nil {
		unlock()
		if errdefs.IsNotFound(err) {
			return nil, nil, errdefs.New(errdefs.ErrSandboxNotFound, "sandbox %q was deleted", sb.Name)
		}
		return nil, nil, err
	}
	return cur, unlock, nil
}

// getLocked reads sandbox id's record; the caller holds its lock. When
// the sandbox is gone (deleted while the caller waited, or before it
// asked), the instance the lock made is forgotten too: nothing of a
// deleted sandbox stays in memory.
func (e *Engine) getLocked(ctx context.Context, id string) (*store.Sandbox, error) {
	sb, err := e.st.GetSandbox(ctx, id)
	if errdefs.IsNotFound(err) {
		e.forgetInstance(id)
	}
	return sb, err
}

// lockID takes the lock of sandbox id (name is for messages) for op, in
// mode; the caller reads the record under it.
func (e *Engine) lockID(ctx context.Context, id, name, op string, mode lockMode) (func(), error) {
	if err := ctx.Err(); err != nil && mode == lockOrWait {
		// Nothing to wait for: no instance is made (a monitor stopped
		// by a delete must not make one after it).
		return nil, err
	}
	in := e.instance(id)
	if mode == lockOrWait {
		return in.lock.wait(ctx, op)
	}
	release, holder, ok := in.lock.try(op)
	if !ok {
		return nil, errdefs.Conflictf("sandbox %q: %s is in progress", name, holder)
	}
	return release, nil
}
